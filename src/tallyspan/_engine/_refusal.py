"""Refusals, leaked reasoning and unearned claims: phrase rules in Japanese, English and Chinese.

Pure functions of the text. Details name the kind of finding, never the text itself. These are our own
linear patterns, so they use the standard `re` (faster here); user patterns go through `regex` with a timeout.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache

from tallyspan._engine._literals import literal_alternation
from tallyspan._engine._scripts import MARKS, without_whitespace

__all__ = ["find_claims", "find_reasoning_leak", "first_turn", "is_refusal", "strip_reasoning"]

# --- refusal ---------------------------------------------------------------------------------------

_REFUSAL = re.compile(
    r"(?i)"
    # English
    r"\bI(?:'m| am)\s+(?:sorry|afraid),?\s+(?:but\s+)?I\s+(?:can(?:'|no)t|cannot|am unable to|won't|will not)\b"
    r"|\bI\s+(?:can(?:'|no)t|cannot|won't|will not|am unable to|am not able to)\s+"
    r"(?:help|assist|provide|fulfil|fulfill|comply|do that|answer|complete|create|write|generate|"
    r"determine|tell|say|give|share|access|browse|embody|understand|offer|discuss|predict|identify)\b"
    r"|\bas an AI(?: language model)?,?\s+I\s+(?:can(?:'|no)t|cannot|don't|do not|am (?:not|unable))\b"
    r"|\bI\s+must\s+(?:decline|refuse)\b"
    r"|\bI(?:'m| am)\s+sorry,?\s+(?:but\s+)?I\s+(?:don't|do not)\s+(?:know|understand|have)\b"
    r"|\bI\s+(?:don't|do not)\s+have\s+(?:enough|sufficient|access|the ability|any information)\b"
    r"|\bI(?:'m| am)\s+(?:not able|unable)\s+to\s+(?:help|assist|provide|answer|share|give|do|comply|fulfil)"
    r"|\bI\s+(?:won't|will not)\s+be\s+able\s+to\s+(?:help|assist|provide|answer|share|give|do)"
    r"|\bnot something I (?:can|could|am able to)\s+(?:help|assist|do|provide|answer)"
    r"|\bI(?:'m| am)\s+not\s+comfortable\s+(?:providing|answering|helping|sharing|discussing|with)"
    # Japanese: an apology followed by "cannot", "do not know", "have no information / ability"
    r"|(?:申し訳(?:ありません|ございません|ない)(?:が|けれど)|ごめんなさい|すみませんが|残念ながら|恐れ入りますが)[^。\n]{0,60}?"
    r"(?:でき(?:ません|かねます)|いたしかねます|控えさせて|(?:知り|わかり|分かり|存じ)ません|"
    r"(?:情報|データ|知識|能力|手段|権限|アクセス)(?:が|は|を)[^。\n]{0,12}?"
    r"(?:ありません|ない|不足|持っていません|持ち合わせていません|(?:提供|与え|記載)されていません))"
    r"|(?:お答え|回答|お手伝い|対応|お応え|ご協力|提供|作成)(?:することは|は|が)?(?:でき(?:ません|かねます)|いたしかねます)"
    # ... or the answering act itself cannot be done ("判断できません", "特定することはできません")
    r"|(?:判断|推測|特定|断定|予測|判定)(?:することは|することが|は|が)?(?:でき(?:ません|かねます)|いたしかねます)"
    # ... declining to answer in other words ("お答えしかねます", "答えられません", "回答を差し控えます")
    r"|(?:お答え|回答|返答|お応え)(?:を)?(?:し|いたし)?かねます|(?:答え|応え)られません"
    r"|(?:お答え|回答|返答|コメント)(?:を|は)?(?:差し控え|控え)(?:させていただきます|させて頂きます|ます|たいと思います)"
    r"|(?:回答|返答|お答え|コメント)(?:は)?(?:し|いたし)ません"
    # ... or objecting to the question instead of answering it
    r"|(?:答え|回答す|お答えす|応じ)る(?:こと)?は(?:適切|適当)では(?:ない|ありません)"
    r"|(?:AI|人工知能|言語モデル|コンピューター?プログラム)(?:アシスタント|チャットボット|モデル)?"
    r"(?:です|であり|である|として|なので|ですので)[^。\n]{0,60}?"
    r"(?:できません|持っていません|ありません)"
    r"|お断り(?:いたします|します|させていただきます)"
    # Japanese: the role is declined ("I have no feelings"), without apology words
    r"|(?:^|(?<=[。！？!?\n]))[ \t　]*(?:私|わたし)(?:は|には|に)[^。\n]{0,40}?"
    r"(?:感情|意識|気持ち|心|身体|肉体|体|意見|経験|情報|知識|データ|権限|アクセス|能力)(?:を|は|が)"
    r"(?:持ちません|持っていません|持っておりません|持ち合わせておりません|持たない|ありません|ございません)"
    # Chinese
    r"|(?:抱歉|对不起|對不起|很遗憾|很遺憾)[，,、]?\s*我(?:不能|无法|無法|没办法|不可以)"
    r"|作为(?:一个)?(?:AI|人工智能|语言模型)[^。\n]{0,20}?(?:不能|无法)"
    r"|我(?:无法|無法|不能)(?:提供|回答|帮助|幫助|协助|協助|完成)"
)
# Every match of _REFUSAL holds one of these words (in lower case): trying its ~20 alternatives at each
# position costs ~1,700 instructions a character, scanning for these literals ~100, so _REFUSAL runs only
# on an opening that holds one (tests/core/test_refusal.py checks each alternative keeps one).
_REFUSAL_ANCHORS = re.compile(
    literal_alternation(
        (
            "sorry", "afraid", "can't", "cannot", "won't", "will not", "unable", "not able", "decline",
            "refuse", "don't", "do not", "am not",
            "申し訳", "できません", "できかねます", "いたしかねます", "控えさせて", "お断り", "持ちません",
            "持っていません", "持たない", "ありません", "ごめんなさい", "すみません", "残念ながら", "恐れ入りますが",
            "かねます", "られません", "控え", "しません", "適切では", "適当では", "おりません", "ございません",
            "not able", "won't be able", "will not be able", "not something", "not comfortable",
            "抱歉", "对不起", "對不起", "很遗憾", "很遺憾", "不能", "无法", "無法",
        )
    )
)  # fmt: skip
# The premise rejected ("such a situation cannot exist"): a refusal only when nothing real follows,
# since "impossible, because ..." can be the answer to a puzzle.
_PREMISE_REJECTED = re.compile(
    r"(?:その|この|そんな|そのような|このような)(?:状況|こと|事態|仮定|前提|質問)(?:は|には)"
    r"(?:あり得ません|ありえません|起こり得ません|成り立ちません|存在しません|お答えできません|答えられません)[。.]?"
)
#: What may follow a rejected premise in a refusal ("ご了承ください。").
_NOTHING_REAL_CHARS = 30
# Chat-template debris a broken model echoes before its answer (<<SYS>>...<</SYS>>, <|im_end|>, [INST]).
# A system block ends at the next <<SYS>> too, so a thousand unclosed ones cost one pass, not a thousand.
_TEMPLATE = re.compile(r"(?s)<<SYS>>(?:(?!<<SYS>>|<</SYS>>).)*<</SYS>>|<\|[^|<>\n]{1,40}\|>|\[/?INST\]")
# A first sentence that only says the task cannot be done (no reason clause: "...ので、持ち込みはできません"
# answers a question about a rule) ...
_JA_TASK_REFUSAL = re.compile(r"^[^。\n]{0,80}?(?:こと|の)は(?:でき(?:ません|かねます)|いたしかねます)。")
_JA_REASON = re.compile(r"ので|ため|から")
# ... unless what cannot be done is the answering itself (guessing, judging, telling which): then a reason
# only says why the question goes unanswered ("記載されていないので、推測することはできません").
_JA_ANSWERING_DECLINED = re.compile(
    r"(?:推測|判断|特定|断定|予測|判定|回答|お答え|お答えする|答えること|答える)(?:する)?(?:こと|の)?(?:は|が)?"
    r"(?:でき(?:ません|かねます)|いたしかねます)。\Z"
)
# "..., but I can ...", "..., but if I were ...": a disclaimer followed by the answer.
_BUT_I_CAN = re.compile(
    r"(?i)(?:ただし|ただ[、,]|しかし|ですが|ませんが|が、|けれど|但是|不过|\bhowever\b|\bbut\b|\bthat said\b)"
    r"[^。.!?\n]{0,60}?"
    r"(?:できます|\bcan\b|可以|仮に|仮定|想像|推測|もし|としたら|だとしたら"
    r"|\bif I were\b|\bimagin|\bhypothetical|假设|假如"
    # ... or a general answer instead of the exact one ("一般的には約30%と言われています")
    r"|一般的に|通常は|例えば|目安|おおよそ|およそ|\bgenerally\b|\btypically\b|\busually\b|\bfor example\b"
    r"|\broughly\b|\bapproximately\b)"
)
_NOT_ASCII_LETTER = bytes(byte for byte in range(128) if not chr(byte).isalpha())
_ASCII_LETTER = re.compile("[A-Za-z]")
#: A refusal is a short answer that says no at its start; a long answer with a caveat is an answer.
_REFUSAL_WINDOW = 240
#: The refusal is in the first sentence (after a greeting or thanks): at most this much of it before.
_REFUSAL_LEAD_CHARS = 60
_LEAD_SENTENCE_END = re.compile(r"[。.!?！？\n]")
# A courtesy sentence: at most 30 characters before its word and 40 after ("Thank you for reaching out.").
_GREETING = re.compile(
    r"(?i)\s*[^。.!?！？\n]{0,30}(?:ありがとう|こんにちは|こんばんは|申し訳(?:ありません|ございません)|ごめんなさい"
    r"|すみません|\bhello\b|\bhi\b|\bthank|\bsure\b|\bsorry\b|\bapologi[sz]e\b)"
    r"[^。.!?！？\n]{0,40}[。.!?！？\n]\s*"
)
# The end of the model's turn: what follows (another "turn" the model made up) is not its answer.
_END_OF_TURN = re.compile(r"<\|(?:im_end|endoftext|eot_id|end)\|>|</s>|\[/INST\]")
# Whitespace and chat-template markup before the model's first words.
_LEADING_MARKUP = re.compile(
    r"(?:\s+|<<SYS>>(?:(?!<<SYS>>|<</SYS>>).)*<</SYS>>|<\|[^|<>\n]{1,40}\|>|<<?/?[A-Za-z_]{1,20}>>?|\[/?INST\]|</s>)*",
    re.DOTALL,
)
#: Longest refusal, in characters, Latin letters counted a third (an English word says what about
#: two Japanese characters do).
_REFUSAL_MAX_CHARS = 400


def _length(compact: str, text: str) -> int:
    """The length of ``compact`` (``text`` without whitespace), Latin letters counted a third."""
    if not MARKS.may_hold(text, _ASCII_LETTER):  # no Latin letter to count
        return len(compact)
    letters = len(compact.encode("ascii", "ignore").translate(None, _NOT_ASCII_LETTER))
    return len(compact) - letters + letters // 3


def first_turn(text: str) -> str:
    """The text up to the first end-of-turn token that follows some content (one linear pass)."""
    found = MARKS(text)
    if "<" not in found and "[" not in found:  # a substring test is far cheaper than the search
        return text
    start = _LEADING_MARKUP.match(text)
    end = _END_OF_TURN.search(text, start.end() if start else 0)
    return text[: end.start()] if end else text


def is_refusal(text: str, compact: str | None = None) -> bool:
    """True when ``text`` is a refusal: a short answer that opens by declining, and does not go on to
    answer ("..., but I can", "..., but if I were ...").

    ``compact``, when given, is ``text`` without whitespace (``"".join(text.split())``), which the
    caller already made: splitting a text costs as much as the rest of this test on a long answer.
    """
    given = text
    text = first_turn(text)
    marks = MARKS(text)
    if "<" in marks or "[" in marks:
        text = _TEMPLATE.sub("", text)
    if not text:
        return False
    if compact is None or text is not given:  # no compact, or not of this text: end of turn, template
        compact = without_whitespace(text)
    if _length(compact, text) > _REFUSAL_MAX_CHARS:
        return False
    head = text.lstrip()[:_REFUSAL_WINDOW]
    found = _REFUSAL.search(head) if _REFUSAL_ANCHORS.search(head.lower()) else None
    if found is None:
        premise = _PREMISE_REJECTED.search(head)
        if premise is not None and not _LEAD_SENTENCE_END.search(head[: premise.start()].rstrip()):
            return len(without_whitespace(text.lstrip()[premise.end() :])) <= _NOTHING_REAL_CHARS
        first = _JA_TASK_REFUSAL.match(head)
        if first is None or (
            _JA_REASON.search(first.group(0)) and not _JA_ANSWERING_DECLINED.search(first.group(0))
        ):
            return _declines_and_stops(text)
        end = first.end()
    else:
        lead = head[: found.start()]
        greeting = _GREETING.match(lead) or _ACKNOWLEDGEMENT.match(lead)
        if greeting:
            lead = lead[greeting.end() :]
        if len(lead) > _REFUSAL_LEAD_CHARS or _LEAD_SENTENCE_END.search(lead.rstrip()):
            return False  # an answer came first; a trailing apology does not take it back
        end = found.end()
    return _BUT_I_CAN.search(text, end, end + _REFUSAL_WINDOW) is None


# --- refusal, by what it does -------------------------------------------------------------------------
#
# The phrases above are the common wordings. A refusal in other words is told by its form: its opening
# sentence declines an act of answering (answer, help, provide, know, judge ...) or defers to someone
# else, and every sentence after it is an apology, a reason, a deferral or an offer: nothing that
# answers. "The file cannot be created by hand. Run the command instead." declines nothing of ours and
# goes on to answer; "I can't stress enough how much sleep matters. Adults need ..." goes on too.

# Acts of answering: what a model declines when it declines to answer.
_JA_ACT = (
    r"(?:お|ご)?(?:答え|応え|回答|返答|応答|応じ|対応|提供|協力|手伝い?|手助け|支援|作成|生成|案内|紹介|説明|"
    r"教え|伝え|お知らせ|申し上げ|おすすめ|お勧め|推薦|判断|推測|特定|断定|予測|判定|保証|コメント|言及|お受け|"
    r"引き受け|受け付け|実行|お力添え)"
)
# The act not done: cannot, will not, is hard, is refrained from (after a connecting particle or none).
_JA_NOT_DONE = (
    r"(?:する|いたす|させていただく|して差し上げる|る)?(?:こと|の)?(?:は|が|も|を|に(?:は)?)?\s*"
    r"(?:でき(?:ません|ない|かねます|かねる)|いたしかねます|しかねます|かねます|(?:ら)?れ(?:ません|ない)|"
    r"(?:し|いたし)(?:ません|ない(?:ことに|ように))|(?:して|いたして)?(?:おりません|いません)|"
    r"(?:は|が)?(?:難しい|困難)"
    r"|(?:を|は)?(?:ご遠慮|遠慮|差し控え|控え)(?:させて(?:いただ|頂)(?:き|いて|いてお)?|いたし|して?お?)?(?:ます|ります)?)"
)
_JA_DECLINE = re.compile(
    _JA_ACT
    + _JA_NOT_DONE
    # not knowing, not having the means ("分かりかねます", "調べる手段がありません", "持ち合わせておりません")
    + r"|(?:分か|わか|知)り(?:ません|かねます)|(?:分か|わか)らないです(?=[。！!]|\Z)|"
    r"存じ(?:ません|上げません|かねます)|"
    r"(?:手段|方法|機能|能力|権限|すべ|術)(?:が|は|も)(?:ありません|ない|ございません|持っていません)|"
    r"持ち合わせて(?:おりません|いません)|持ち合わせがありません"
)
_EN_DECLINE = re.compile(
    r"(?i)\bI(?:'m| am)?\s+(?:really\s+|truly\s+|simply\s+|afraid\s+I\s+)?"
    r"(?:can(?:'|no)t|cannot|won't|will not|unable to|not able to|not going to|"
    r"must (?:respectfully |politely )?decline|have to (?:respectfully |politely )?decline|"
    r"(?:don't|do not) (?:feel comfortable|know)|not (?:comfortable|in a position))\b"
)
# An apology that opens an English decline ("I apologize, but I'm not able to ...").
_EN_APOLOGY = re.compile(
    r"(?i)^(?:I apologi[sz]e|I(?:'m| am) (?:so |very |truly )?sorry|(?:so |very )?sorry|apologies|unfortunately)"
    r"[,!.]?\s+(?:but\s+)?"
)
# What may follow a decline and leave it a refusal: apologies, reasons, deferrals and offers.
_JA_NOTHING_REAL = re.compile(
    r"申し訳|すみません|ごめん|恐縮|ご了承|ご容赦|ご理解|ご期待に添え|残念"
    r"|AI|人工知能|言語モデル|アシスタント|ポリシー|規約|ガイドライン|倫理|安全|個人情報|プライバシー"
    r"|リアルタイム|最新の情報|インターネット|アクセス|(?:情報|データ|資料)(?:が|は|も|を)|権限"
    r"|ご相談|お問い合わせ|問い合わせ|ご確認|ご参照|ご覧|専門家|専門の|公式|窓口|担当"
    r"|(?:他|ほか)に|何か|お気軽に|お申し付け|ご質問があれば|あれば"
)
_EN_NOTHING_REAL = re.compile(
    r"(?i)\bsorry\b|\bapologi|\bunfortunately\b|\bunderstand\b|\bbecause\b|\bsince\b|\bas an ai\b|"
    r"\blanguage model\b|\bguidelines?\b|\bpolic(?:y|ies)\b|\bnot (?:allowed|permitted|able)\b|"
    r"\bconsult\b|\bcontact\b|\breach out\b|\bcheck with\b|\bprofessional\b|\bexpert\b|\bofficial\b|"
    r"\blet me know\b|\bfeel free\b|\bhappy to help\b|\banything else\b|\bother questions?\b|"
    r"\bI (?:don't|do not) have\b"
)
# Deferring alone declines too: "医療に関する判断は医師にご相談ください" with nothing else.
_DEFERRAL = re.compile(
    r"(?:ご相談|お問い合わせ|ご確認)(?:ください|下さい|いただ|になることを|されることを)"
    r"|(?i:\b(?:please )?(?:consult|contact|reach out to|check with) (?:a|an|your|the)\b)"
)
_DECLINE_SENTENCE = re.compile(r"(?:[^。！？!?.\n]|[.](?!\s|\Z))+(?:[。！？!?]+|[.](?=\s|\Z)|\n|\Z)")
#: A sentence after the decline this short (without whitespace) says nothing that answers ...
_NOTHING_CHARS = 12
#: ... and all of them together are no longer than this: a refusal gives a reason or two, not an essay.
_MAX_AFTER_DECLINE_CHARS = 150
# A decline quoted or named ("「分かりません」と答える", "分かりません、という答え") is not said.
_QUOTED_AFTER = re.compile(r"\s*[」』\"”]|[、,]?\s*(?:と|って)(?:[いう言答書]|は|も|、)")
# A clause that states something, then concedes ("...と考えられますが、"): an answer before the decline.
_ANSWER_CONCEDED = re.compile(r"(?:ます|です|である|だ|た)(?:が|けど|けれど(?:も)?)[、,]")
_COURTESY_WORD = re.compile(r"恐縮|申し訳|残念|恐れ入り|失礼|すみません|ごめん")
# A short remark on the question before the decline ("それは驚くべき体験ですね。", "面白い質問ですね。",
# "What a fascinating question!"): courtesy too. Only a remark on the question or its situation: "答えは
# 東京ですね。" says something.
_ACKNOWLEDGEMENT = re.compile(
    r"\s*(?:(?:それは|これは)[^。！？!?\n]{0,16}"
    r"|[^。！？!?\n]{0,16}(?:質問|問い|問題|体験|経験|状況|お話|お題|シナリオ|想像|発想|アイデア|テーマ))"
    r"ですね[。！!]*\s*"
    r"|(?i:\s*(?:what an?|that's an?|that is an?)\s+(?:\w+\s+){0,2}(?:question|scenario|idea|thought)[.!]*\s*)"
)
_CONCESSION = re.compile(r"(?i)\b(?:but|however|though|although|that said)\b")
#: At most this many courtesy sentences (greeting, thanks, apology) before the decline.
_MAX_COURTESY = 2


def _says_nothing(sentence: str) -> bool:
    if len(without_whitespace(sentence)) <= _NOTHING_CHARS:
        return True
    return bool(
        _JA_NOTHING_REAL.search(sentence)
        or _EN_NOTHING_REAL.search(sentence)
        or _JA_DECLINE.search(sentence)
        or _EN_DECLINE.search(sentence)
    )


def _declined_in_full(sentence: str, declines: re.Match[str]) -> bool:
    """The decline is said, not quoted, and its sentence does not go on to answer ("分かりませんが、彼の
    作品を見ると ...", "I can't give medical advice, but rest and fluids help")."""
    lead = sentence[: declines.start()]
    # A clause conceded before the decline is an answer, unless it is an apology ("恐縮ですが、").
    conceded = any(
        not _COURTESY_WORD.search(lead, lead.rfind("、", 0, found.start()) + 1, found.start())
        for found in _ANSWER_CONCEDED.finditer(lead)
    )
    if len(lead) > _REFUSAL_LEAD_CHARS or conceded or _QUOTED_AFTER.match(sentence, declines.end()):
        return False  # an answer led the sentence up to it; a quoted decline is not said
    tail = sentence[declines.end() :]
    if declines.re is _EN_DECLINE:  # English names what it declines after the verb: only a "but" goes on
        concession = _CONCESSION.search(tail)
        return concession is None or _says_nothing(tail[concession.end() :])
    return len(without_whitespace(tail)) <= _NOTHING_CHARS or _says_nothing(tail)


def _declines_and_stops(text: str) -> bool:
    """A refusal by its form: courtesy at most, then a sentence that declines an act of answering (or
    defers to someone else), then only apologies, reasons, deferrals and offers."""
    sentences = [part.strip() for part in _DECLINE_SENTENCE.findall(text)]
    sentences = [part for part in sentences if part]
    for index, sentence in enumerate(sentences[: _MAX_COURTESY + 1]):
        declines = (
            _JA_DECLINE.search(sentence)
            or _EN_DECLINE.match(_EN_APOLOGY.sub("", sentence.lstrip("\"'“ "), count=1))
            or (_EN_DECLINE.search(sentence) and _EN_NOTHING_REAL.match(sentence.lstrip()))
        )
        if declines and not _declined_in_full(sentence, declines):
            return False
        # Objecting to the question declines it ("そのような状況はあり得ません"), unless a reason leads up to
        # the objection: "...ので、そのような状況はあり得ません" is a puzzle's answer.
        premise = None if declines else _PREMISE_REJECTED.search(sentence)
        if premise is not None:
            lead = sentence[: premise.start()]
            if len(lead) > _REFUSAL_LEAD_CHARS or _JA_REASON.search(lead):
                return False
        if declines or premise is not None or _DEFERRAL.search(sentence):
            rest = sentences[index + 1 :]
            return sum(len(without_whitespace(part)) for part in rest) <= _MAX_AFTER_DECLINE_CHARS and all(
                map(_says_nothing, rest)
            )
        # _GREETING wants its sentence's end: a sentence cut at a line break or the text's end gets one.
        if not (_GREETING.fullmatch(sentence + "\n") or _ACKNOWLEDGEMENT.fullmatch(sentence)):
            return False  # something other than courtesy came first
    return False


# --- reasoning -------------------------------------------------------------------------------------

_THINK_BLOCK = re.compile(r"(?is)<(think|thinking|reasoning|reflection)>(.*?)(?:</\1>|\Z)")
_LONE_CLOSE = re.compile(r"(?i)</(?:think|thinking|reasoning|reflection)>")
_HARMONY = re.compile(r"<\|(?:channel|start|message|end|return|constrain)\|>|<\|channel\|>\s*analysis")
_OPENERS = re.compile(
    r"(?i)^\s*(?:"
    r"(?:okay|ok|alright|hmm+|so),?\s+(?:so\s+)?(?:let me|let's|i need to|i should|the user|we need to|first,? i)"
    r"|let me (?:think|analy[sz]e|figure|work through|break (?:this|it) down|start by)"
    r"|the user (?:is asking|asks|wants|has asked|requests|would like)"
    r"|we need to (?:answer|respond|produce|write|figure|determine|output)"
    r"|first,? i (?:need|should|will) (?:to )?(?:understand|figure|think|analy[sz]e)"
    r"|ユーザー(?:は|が)[^。\n]{0,60}?(?:求めて|尋ねて|聞いて|質問して|依頼して|望んで)い(?:る|ます)"
    # A filler alone ("うーん、", "嗯，") opens speech, in character or not; reasoning names its task next.
    r"|(?:えーと|えっと|うーん|ふむ)[、。,]\s*(?:ユーザー|(?:まず|では)[、,]?\s*(?:考え|整理)|考えて(?:みよう|みます|みる))"
    r"|(?:好的，)?(?:嗯+，\s*)?(?:用户(?:要求|问|想|希望|让我)|我(?:需要|得|应该)(?:先|想|考虑|分析))"
    r")"
)


# Harmony (gpt-oss): the analysis channel is the model's scratchpad; the final channel is the answer.
_HARMONY_ANALYSIS = re.compile(
    r"(?s)(?:<\|start\|>\s*assistant\s*)?<\|channel\|>\s*analysis\s*<\|message\|>.*?"
    r"(?:<\|end\|>|(?=<\|start\|>|<\|channel\|>)|\Z)"
)
_HARMONY_HEADER = re.compile(
    r"(?:<\|start\|>\s*assistant\s*)?<\|channel\|>\s*\w+\s*(?:<\|constrain\|>[^<]*)?<\|message\|>"
    r"|<\|(?:return|end|call)\|>"
)


def strip_reasoning(text: str) -> str:
    """Return ``text`` without think blocks, anything before a lone closing tag, and harmony analysis
    messages (the final channel's message is kept, without its header); and, when it opens with
    reasoning in no tag ("Okay, the user is asking ..."), without that opening paragraph."""
    if "<" in MARKS(text):  # every tag and harmony token opens with "<"
        text = _THINK_BLOCK.sub("", text)
        closing = list(_LONE_CLOSE.finditer(text))
        if closing:
            text = text[closing[-1].end() :]
        if "<|channel|>" in text:
            text = _HARMONY_HEADER.sub("", _HARMONY_ANALYSIS.sub("", text))
    if _OPENERS.match(text) is not None:
        # The paragraph that opens with reasoning is set aside like a think block: an English one before
        # a Japanese answer leaks reasoning and mixes no language. A single paragraph is all there is.
        paragraph_end = text.find("\n\n")
        rest = text[paragraph_end:].strip() if paragraph_end >= 0 else ""
        if rest:
            return rest
    return text


def find_reasoning_leak(text: str, reasoning_text: str = "") -> str | None:
    """Return a content-free description of leaked reasoning in ``text``, or None.

    Args:
        text: the answer.
        reasoning_text: reasoning the provider returned in its own field; seeing it repeated in the
            answer is a leak too.
    """
    if "<" in MARKS(text):  # every tag and harmony token opens with "<"
        # A bare tag or an empty block leaks nothing (servers that strip the reasoning often leave them).
        if any(block.group(2).strip() for block in _THINK_BLOCK.finditer(text)):
            return "think block in the output"
        lone = _LONE_CLOSE.search(text)
        if lone is not None and _THINK_BLOCK.sub("", text[: lone.start()]).strip():
            return "closing think tag in the output"
        if _HARMONY.search(text):
            return "harmony channel token in the output"
    if _OPENERS.search(text[:200]):
        return "output opens with reasoning"
    probe = without_whitespace(reasoning_text)[:60]
    if len(probe) >= 30 and probe in without_whitespace(text):
        return "the provider's reasoning is repeated in the output"
    return None


# --- claims ----------------------------------------------------------------------------------------

_CLAIM_KINDS: Sequence[tuple[str, re.Pattern[str]]] = (
    # Patterns run on the raw text (\d matches fullwidth digits too); only claim sentences are normalized.
    ("percentage", re.compile(r"(?i)\d+(?:[.,．]\d+)?\s*(?:[%％]|percent\b|パーセント|百分之)")),
    (
        "customer",
        re.compile(
            r"(?i)\b(?:\d[\d,.]*\+?\s*(?:k|m|million|thousand)?|thousands|millions|hundreds)\s+(?:of\s+)?"
            r"(?:customers|users|companies|businesses|clients|teams|organi[sz]ations|enterprises)\b"
            r"|\b(?:trusted|used|adopted|chosen|relied on)\s+by\b"
            r"|[\d,.，万千百億]+\s*(?:社|人|名|件|団体|企業)(?:以上)?(?:の(?:お客様|企業|ユーザー)|が|に)"
            r"(?:導入|採用|利用|愛用|選ばれ)"
            r"|(?:導入|採用)(?:実績|企業数|社数)"
            r"|[\d,.万千]+\s*(?:家)?(?:企业|客户|用户)"
        ),
    ),
    (
        "superlative",
        re.compile(
            r"(?i)\b(?:world'?s|industry'?s|market'?s|the)\s+"
            r"(?:first|leading|best|largest|fastest|only|#1|number one)\b"
            r"|[#＃][1１]\b|\bnumber one\b|\bmarket leader\b|\bindustry[- ]leading\b"
            r"|(?:業界|世界|国内|日本|市場)(?:初|最大|最高|最速|唯一|No\.?\s*1|ナンバーワン|一位|トップ)"
            r"|シェア(?:No\.?\s*1|一位|トップ)|満足度\s*(?:No\.?\s*1|一位)"
            r"|(?:行业|业界|全球|国内)(?:第一|领先|最大|首个|首家)"
        ),
    ),
)
# Every match of a kind's pattern holds one of its trigger words (the noun a count is of, the verb of an
# adoption, the word a superlative is built on). The patterns run only around those words, so ordinary
# text, where they occur rarely, is scanned once, by one alternation of literals (a prefix character set
# lets the engine skip the text in C), instead of once per pattern at every position.
_TRIGGERS: dict[str, tuple[str, ...]] = {
    "percentage": ("%", "％", "percent", "パーセント", "百分之"),
    "customer": (
        "customers", "users", "companies", "businesses", "clients", "teams", "organi", "enterprises",
        "trusted", "used", "adopted", "chosen", "relied",
        "導入", "採用", "利用", "愛用", "選ばれ", "企业", "客户", "用户",
    ),
    "superlative": (
        "first", "leading", "best", "largest", "fastest", "only", "#", "＃", "number one", "leader",
        "業界", "世界", "国内", "日本", "市場", "シェア", "満足度", "行业", "业界", "全球",
    ),
}  # fmt: skip
_KIND_OF_TRIGGER: dict[str, str] = {
    trigger: kind for kind, triggers in _TRIGGERS.items() for trigger in triggers
}
# An ASCII text is lowercased (cheap for ASCII) and scanned once by an alternation of the triggers.
_ANY_TRIGGER = re.compile(literal_alternation(_KIND_OF_TRIGGER))
# Lowercasing any other text costs more than the scan itself, so it is scanned as written, for each
# trigger in lower case, capitalised, in title case and in upper case ("Trusted by", "Number One").
_KIND_OF_CASED_TRIGGER: dict[str, str] = {
    variant: kind
    for trigger, kind in _KIND_OF_TRIGGER.items()
    for variant in (trigger, trigger.capitalize(), trigger.title(), trigger.upper())
}
_ANY_CASED_TRIGGER = re.compile(literal_alternation(_KIND_OF_CASED_TRIGGER))


def _is_kana(char: str) -> bool:
    return "\u3040" <= char <= "\u30ff"


def _trigger_prefilter(
    triggers: Iterable[str],
) -> tuple[re.Pattern[bytes], tuple[tuple[str, tuple[tuple[str, str], ...]], ...]]:
    """What a text must hold for one of ``triggers`` to occur in it: a pattern of the ASCII triggers in
    lower case (for the text's ASCII characters in lower case), and the other triggers grouped by a lead
    character each holds, each with the rest of its distinct characters: (lead, ((rest, trigger), ...)).

    Leads are picked greedily, the character in most triggers not yet grouped first (用 leads 利用, 採用
    ...), so one missing lead rules out its whole group; kana, which nearly every Japanese text holds,
    only when nothing else is left. The rest is tested han before kana for the same reason.
    """
    words = {trigger.lower() for trigger in triggers if trigger.isascii()}
    left = sorted({trigger for trigger in triggers if not trigger.isascii()})
    groups: list[tuple[str, tuple[tuple[str, str], ...]]] = []
    while left:
        chars = sorted({char for trigger in left for char in trigger})
        lead = max(chars, key=lambda char: (sum(char in trigger for trigger in left), not _is_kana(char)))
        rests = tuple(
            ("".join(sorted(set(trigger) - {lead}, key=lambda char: (_is_kana(char), char))), trigger)
            for trigger in left
            if lead in trigger
        )
        groups.append((lead, rests))
        left = [trigger for trigger in left if lead not in trigger]
    return re.compile(literal_alternation(words).encode("ascii")), tuple(groups)


# Scanning a non-ASCII text for the cased triggers costs ~50 instructions a character in `re` (~70k on a
# 1,000-character Japanese report). Most texts hold none, which C-speed tests show for far less: the
# text's ASCII characters (lowercased) hold no ASCII trigger, and each other trigger misses a character
# (when it has them all, a substring search, ~1 µs, tells). ~70k -> ~25k on the report.
_ASCII_TRIGGERS, _TRIGGER_GROUPS = _trigger_prefilter(_KIND_OF_CASED_TRIGGER)
#: A character an ASCII trigger begins with, in either case.
_ASCII_TRIGGER_START = re.compile(
    "["
    + re.escape("".join(sorted({trigger[0] for trigger in _KIND_OF_CASED_TRIGGER if trigger.isascii()})))
    + "]",
    re.IGNORECASE,
)
# Which characters of the non-ASCII triggers a text holds: found with the other checks' marks, in one scan.
MARKS.add(char for _, rests in _TRIGGER_GROUPS for _, trigger in rests for char in trigger)
#: A claim pattern runs this far either side of its trigger word (a claim is a phrase, not a paragraph).
_CLAIM_REACH = 120
# A percentage is a claim only beside what it claims: satisfaction, share, a comparison, an improvement,
# customers. "目標の 46%", "CPU 97%" or "tests 95% passed" report the work itself and are not claims.
_PERCENTAGE_CLAIM_CUES: tuple[str, ...] = (
    "satisf", "share", "customer", "user", "client", "faster", "cheaper", "better", "more than", "less than",
    "higher", "lower", "improv", "increas", "reduc", "cut ", "grow", "boost", "roi", "retention", "churn",
    "accura", "success rate", "than", "vs", "compared",
    "満足", "シェア", "顧客", "お客様", "ユーザー", "利用者", "向上", "削減", "改善", "増加", "増", "減",
    "成長", "高速", "短縮", "精度", "成功率", "継続率", "解約率", "比", "導入", "採用", "効率", "アップ",
    "满意", "份额", "客户", "用户", "提升", "提高", "降低", "增长", "减少", "准确",
)  # fmt: skip
_SENTENCE_END = re.compile(r"[。！？!?\n]|\.(?:\s|$)")
_UP_TO_SENTENCE_END = re.compile(r"(?s).*(?:[。！？!?\n]|\.(?:\s|$))")
#: A claim's sentence is looked for this far either side of it.
_SENTENCE_REACH = 200


def _normalize(text: str) -> str:
    # NFKC only when needed (fullwidth digits, ％): the quick check is far cheaper than normalizing.
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    return text.casefold()


def _sentence_around(text: str, start: int, end: int) -> str:
    """The sentence around a claim, at most ``_SENTENCE_REACH`` characters either side (linear overall)."""
    lower = max(start - _SENTENCE_REACH, 0)
    before = _UP_TO_SENTENCE_END.match(text, lower, start)
    right_match = _SENTENCE_END.search(text, end, end + _SENTENCE_REACH)
    right = right_match.end() if right_match else min(end + _SENTENCE_REACH, len(text))
    return text[before.end() if before else lower : right]


def find_claims(text: str, allowed: Sequence[str]) -> list[str]:
    """Return the kinds of claims in ``text`` that no phrase of ``allowed`` covers (one per claim).

    A claim is covered when an allowed phrase occurs (NFKC, case-folded) in the claim's sentence. A
    percentage counts only in a sentence that says what it claims (satisfaction, share, a comparison,
    an improvement, customers): a progress or utilisation figure is the report's own subject.
    """
    allowed_normalized: tuple[str, ...] | None = None  # with the first claim: most answers make none
    found: list[str] = []
    for kind, match in _claim_matches(text):
        sentence = _normalize(_sentence_around(text, match.start(), match.end()))
        if kind == "percentage" and not any(cue in sentence for cue in _PERCENTAGE_CLAIM_CUES):
            continue
        if allowed_normalized is None:
            allowed_normalized = _normalized_phrases(tuple(allowed))
        if not any(phrase in sentence for phrase in allowed_normalized):
            found.append(kind)
    return found


@lru_cache(maxsize=64)
def _normalized_phrases(allowed: tuple[str, ...]) -> tuple[str, ...]:
    """A contract's allowed phrases as claims are compared (NFKC, case-folded), once per contract."""
    return tuple(_normalize(phrase) for phrase in allowed if phrase.strip())


def _may_hold_trigger(text: str) -> bool:
    """False only when no cased trigger can occur in ``text`` (a text that is not all ASCII)."""
    # The text's ASCII characters, lowercased, only where one can begin an ASCII trigger.
    if MARKS.may_hold(text, _ASCII_TRIGGER_START) and _ASCII_TRIGGERS.search(
        text.encode("ascii", "ignore").lower()
    ):
        return True  # an ASCII trigger's characters are a run of the text's ASCII characters
    found = MARKS(text)
    for lead, rests in _TRIGGER_GROUPS:
        if lead in found:
            for chars, trigger in rests:
                for char in chars:
                    if char not in found:
                        break
                else:
                    if trigger in text:
                        return True
    return False


def _claim_matches(text: str) -> Iterator[tuple[str, re.Match[str]]]:
    """(kind, match) of each claim pattern's matches, kind by kind, in text order."""
    if text.isascii():
        triggers, kind_of = _ANY_TRIGGER.finditer(text.lower()), _KIND_OF_TRIGGER
    elif not _may_hold_trigger(text):
        return
    else:
        triggers, kind_of = _ANY_CASED_TRIGGER.finditer(text), _KIND_OF_CASED_TRIGGER
    regions: dict[str, list[list[int]]] = {}
    for trigger in triggers:
        spans = regions.setdefault(kind_of[trigger.group()], [])
        start, end = max(trigger.start() - _CLAIM_REACH, 0), trigger.end() + _CLAIM_REACH
        if spans and start <= spans[-1][1]:
            spans[-1][1] = end  # overlapping windows are scanned as one
        else:
            spans.append([start, end])
    for kind, pattern in _CLAIM_KINDS:
        for start, end in regions.get(kind, ()):
            yield from ((kind, match) for match in pattern.finditer(text, start, end))
