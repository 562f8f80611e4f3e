"""The benchmarks that compare off_topic's word sources: the analysers give the engine's definition of a
content word, and leave-one-model-out chooses each model's point on the other models only."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from functools import cache
from types import ModuleType

import pytest
from tests.modules import BENCH, load_script

from tallyspan import Contract

# A sentence with each kind of word the definition keeps or leaves out: nouns (桜, 公園, 説明), a verb
# (咲く), an adjective (美しい), an adjectival noun (静か); a number and its counter (3本), a pronoun (私),
# verbs that only support another (て いる, する, ください) and grammar.
SENTENCE = "公園の桜が3本咲いていることを私は説明してください。静かで美しい。"
CONTENT = frozenset({"公園", "桜", "咲く", "事", "説明", "静か", "美しい"})


@cache
def _bench(name: str) -> ModuleType:
    sys.path.insert(0, str(BENCH))  # the comparison imports label_agreement from beside it
    try:
        return load_script(BENCH / name)
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture
def analysers() -> Iterator[ModuleType]:
    module = _bench("compare_analysers.py")
    yield module
    sys.modules.pop("label_agreement", None)


def _words_or_skip(
    make: Callable[[], Callable[[str], frozenset[str] | None]],
) -> Callable[[str], frozenset[str] | None]:
    try:
        return make()
    except ImportError as error:
        pytest.skip(f"analyser not installed: {error}")


def test_fugashi_gives_the_engines_words(analysers: ModuleType) -> None:
    words = _words_or_skip(analysers.fugashi_words)
    assert words(SENTENCE) == CONTENT


@pytest.mark.parametrize("mode", ["A", "C"])
def test_sudachi_gives_the_same_kinds_of_words(analysers: ModuleType, mode: str) -> None:
    words = _words_or_skip(lambda: analysers.sudachi_words(mode))
    # Sudachi's normalised form keeps こと in kana where UniDic's lemma writes 事.
    assert words(SENTENCE) == (CONTENT - {"事"}) | {"こと"}


def test_janome_gives_the_same_kinds_of_words(analysers: ModuleType) -> None:
    words = _words_or_skip(analysers.janome_words)
    # IPADIC calls こと a dependent noun (非自立), which the definition leaves out.
    assert words(SENTENCE) == CONTENT - {"事"}


def _case(bench: ModuleType, model: str, labels: frozenset[str]) -> object:
    return bench.Case("set", model, model, "", "", (), labels, Contract())


OFF = frozenset({"off_topic"})
REFUSAL = frozenset({"refusal"})
CLEAN: frozenset[str] = frozenset()


def test_each_model_is_judged_at_the_point_the_other_models_choose() -> None:
    bench = _bench("label_agreement.py")
    labels = [CLEAN, CLEAN, CLEAN, CLEAN, OFF, OFF]
    cases = [_case(bench, model, label) for model, label in zip("aabbcc", labels, strict=True)]
    # x (the fixed point) and w are wrong on one of a's answers, x with an off_topic alert; y is right on
    # a's and c's answers and alerts on all of b's.
    verdicts = {
        ("x",): [OFF, CLEAN, CLEAN, CLEAN, CLEAN, CLEAN],
        ("w",): [REFUSAL, CLEAN, CLEAN, CLEAN, CLEAN, CLEAN],
        ("y",): [CLEAN, CLEAN, OFF, OFF, OFF, OFF],
    }
    figures = bench.held_out_figures(cases, verdicts, ("x",))
    assert [(row.model, row.answers, row.at_fixed, row.held_out, row.chosen) for row in figures] == [
        ("a", 2, 1, 1, ("x",)),  # on b and c all three give 2 exact, x and w no alert: the fixed point
        ("b", 2, 2, 0, ("y",)),  # on a and c: x 1, w 1, y 4
        ("c", 2, 0, 0, ("w",)),  # on a and b: x 3, w 3, y 2; of x and w, w raises no alert
    ]


def test_a_words_general_frequency_is_looked_up_under_each_of_its_written_forms() -> None:
    """UniDic writes こと as 事 and それぞれ as 其々, far rarer in print than the kana: the comparison of
    weights reads a word's frequency under its surface and readings too."""
    from tallyspan._engine._words import analyser_available

    if not analyser_available():
        pytest.skip("the optional analyser (tallyspan[ja]) is not installed")
    weights = _bench("compare_word_weights.py")
    try:
        forms = weights.Forms()
        forms.add("それぞれのことをアニメで")
    finally:
        sys.modules.pop("label_agreement", None)
    assert {word: sorted(forms.forms[word]) for word in ("事", "其々", "animation")} == {
        "事": ["こと", "コト", "事"],
        "其々": ["それぞれ", "ソレゾレ", "其々"],
        "animation": ["あにめ", "アニメ", "アニメ-animation"],
    }
