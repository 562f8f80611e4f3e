# ruff: noqa: E501 - each deliverable stays one literal, as an answer gives it
"""Bare code and data have no language; prose has, whatever symbols it holds (tallyspan/_engine/_code.py).

Written from DEFINITIONS.md (japanese-mt-bench/labels): "An answer that is only code, JSON, CSV, numbers or
math ..., with no prose, is clean, fenced or not: a bare program with English identifiers, comments and
string literals is code, not English prose"; English prose under a Japanese contract is not_japanese, and
English sentences inside a Japanese answer are broken_language_mix. Each deliverable is checked under
Contract(language="ja", min_chars=10) with the prompt that asked for it.
"""

from __future__ import annotations

import pytest

from tallyspan import Contract, check
from tallyspan._engine import _code
from tallyspan._engine._language import _has_sentence, profile

CONTRACT = Contract(language="ja", min_chars=10)

# Bare (unfenced) code and data deliverables, each the kind its prompt asked for: clean.
CODE = [
    ("HTMLでボタンを作って", '<button type="button" onclick="alert(\'hi\')">Click me</button>'),
    (
        "Cでハローワールドを書いて",
        '#include <stdio.h>\n\nint main(void) {\n    printf("Hello, world!\\n");\n    return 0;\n}',
    ),
    (
        "C++で配列の合計を求める関数を書いて",
        "#include <vector>\n#include <numeric>\n\nint sum(const std::vector<int>& v) {\n    return std::accumulate(v.begin(), v.end(), 0);\n}",
    ),
    (
        "Javaで二つの数の最大値を返すメソッドを書いて",
        "public static int max(int a, int b) {\n    // Return the larger of the two values.\n    return a > b ? a : b;\n}",
    ),
    (
        "GoでHTTPサーバーを書いて",
        'package main\n\nimport (\n\t"fmt"\n\t"net/http"\n)\n\nfunc main() {\n\thttp.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {\n\t\tfmt.Fprintln(w, "Hello from Go")\n\t})\n\thttp.ListenAndServe(":8080", nil)\n}',
    ),
    (
        "Rustでフィボナッチ数を計算して",
        'fn fib(n: u64) -> u64 {\n    match n {\n        0 | 1 => n,\n        _ => fib(n - 1) + fib(n - 2),\n    }\n}\n\nfn main() {\n    println!("{}", fib(10));\n}',
    ),
    (
        "JavaScriptで配列をシャッフルする関数を書いて",
        "function shuffle(array) {\n  for (let i = array.length - 1; i > 0; i--) {\n    const j = Math.floor(Math.random() * (i + 1));\n    [array[i], array[j]] = [array[j], array[i]];\n  }\n  return array;\n}",
    ),
    ("JavaScriptの一行で配列の合計を求めて", "const total = numbers.reduce((a, b) => a + b, 0);"),
    (
        "TypeScriptでユーザー型を定義して",
        "interface User {\n  id: number;\n  name: string;\n  email?: string;\n}\n\nexport function greet(user: User): string {\n  return `Hello, ${user.name}`;\n}",
    ),
    (
        "Reactでカウンターを作って",
        "import { useState } from 'react';\n\nexport default function Counter() {\n  const [count, setCount] = useState(0);\n  return (\n    <button onClick={() => setCount(count + 1)}>Clicked {count} times</button>\n  );\n}",
    ),
    (
        "HTMLでログインフォームを作って",
        '<form action="/login" method="post">\n  <label for="user">User name</label>\n  <input id="user" name="user" type="text">\n  <label for="pw">Password</label>\n  <input id="pw" name="pw" type="password">\n  <button type="submit">Log in</button>\n</form>',
    ),
    (
        "CSSでボタンを中央に配置して",
        ".container {\n  display: flex;\n  justify-content: center;\n  align-items: center;\n  height: 100vh;\n}",
    ),
    (
        "SQLで売上上位10件を取得して",
        "SELECT product_name, SUM(amount) AS total\nFROM sales\nGROUP BY product_name\nORDER BY total DESC\nLIMIT 10;",
    ),
    (
        "SQLでテーブルを作って",
        "CREATE TABLE users (\n  id INTEGER PRIMARY KEY,\n  name TEXT NOT NULL,\n  created_at TIMESTAMP\n);",
    ),
    ("シェルで古いログを削除するコマンドを書いて", "find /var/log -name '*.log' -mtime +30 -delete"),
    (
        "bashスクリプトでバックアップして",
        '#!/bin/bash\nset -euo pipefail\nSRC="$HOME/docs"\nDEST="/backup/$(date +%F)"\nmkdir -p "$DEST"\nrsync -av "$SRC/" "$DEST/"\necho "Backup finished"',
    ),
    (
        "PowerShellでサービス一覧を表示して",
        "Get-Service | Where-Object { $_.Status -eq 'Running' } | Sort-Object DisplayName | Format-Table -AutoSize",
    ),
    (
        "YAMLでDocker Composeの設定を書いて",
        "version: '3'\nservices:\n  web:\n    image: nginx:latest\n    ports:\n      - \"80:80\"\n  db:\n    image: postgres:16\n    environment:\n      POSTGRES_PASSWORD: example",
    ),
    (
        "TOMLで設定ファイルを書いて",
        '[server]\nhost = "0.0.0.0"\nport = 8080\n\n[database]\nurl = "postgres://localhost/app"\npool_size = 5',
    ),
    (
        "INIファイルの例を書いて",
        "[general]\nname = My Application\nversion = 1.2\n\n[logging]\nlevel = debug\nfile = app.log",
    ),
    ("CSVで商品リストを作って", "id,name,price,stock\n1,Apple,120,50\n2,Banana,80,120\n3,Cherry,300,15"),
    (
        "TSVで社員一覧を作って",
        "id\tname\tdepartment\n1\tTanaka\tSales\n2\tSuzuki\tEngineering\n3\tSato\tMarketing",
    ),
    (
        "XMLで書籍データを表して",
        '<?xml version="1.0" encoding="UTF-8"?>\n<books>\n  <book id="1">\n    <title>The Hobbit</title>\n    <author>J. R. R. Tolkien</author>\n  </book>\n</books>',
    ),
    (
        "Markdownの表で比較して",
        "| Language | Typing | Year |\n|---|---|---|\n| Python | Dynamic | 1991 |\n| Java | Static | 1995 |\n| Go | Static | 2009 |",
    ),
    ("メールアドレスの正規表現を書いて", "^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\\.[A-Za-z]{2,}$"),
    ("郵便番号の正規表現", "^\\d{3}-\\d{4}$"),
    ("LaTeXで二次方程式の解の公式を書いて", "x = \\frac{-b \\pm \\sqrt{b^2 - 4ac}}{2a}"),
    (
        "LaTeXで表を作って",
        "\\begin{tabular}{|c|c|}\n\\hline\nName & Score \\\\\n\\hline\nAlice & 90 \\\\\nBob & 85 \\\\\n\\hline\n\\end{tabular}",
    ),
    (
        "天気を調べるツールを呼び出して",
        '{"name": "get_weather", "arguments": {"location": "Tokyo", "unit": "celsius"}}',
    ),
    (
        "ツールを呼んで",
        '<tool_call>\n{"name": "search", "arguments": {"query": "latest Python release"}}\n</tool_call>',
    ),
    (
        "関数呼び出しで答えて",
        '[{"type": "function", "function": {"name": "get_time", "arguments": "{\\"tz\\": \\"Asia/Tokyo\\"}"}}]',
    ),
    (
        "この変更のdiffを見せて",
        "--- a/app.py\n+++ b/app.py\n@@ -1,4 +1,4 @@\n import os\n-DEBUG = True\n+DEBUG = False\n def main():\n     pass",
    ),
    (
        "エラーのスタックトレースを貼って",
        'Traceback (most recent call last):\n  File "main.py", line 3, in <module>\n    print(1 / 0)\nZeroDivisionError: division by zero',
    ),
    (
        "ログの例を見せて",
        "2024-05-01 12:00:01 INFO  Server started on port 8080\n2024-05-01 12:00:05 WARN  Slow query (1532 ms)\n2024-05-01 12:00:09 ERROR Connection refused: db:5432",
    ),
    ("積分を計算して", "∫₀¹ x² dx = [x³/3]₀¹ = 1/3"),
    ("計算して", "(12 + 8) × 3 ÷ 4 = 15"),
    ("Pythonでリストを逆順にして", "numbers = [1, 2, 3, 4]\nnumbers.reverse()\nprint(numbers)"),
    (
        "Pythonのクラスを書いて",
        'class Stack:\n    """A simple stack."""\n\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        self.items.append(item)\n\n    def pop(self):\n        return self.items.pop()',
    ),
    (
        "JSONで設定を書いて",
        '{\n  "name": "my-app",\n  "version": "1.0.0",\n  "scripts": {\n    "start": "node index.js",\n    "test": "jest"\n  }\n}',
    ),
    (
        "Dockerfileを書いて",
        'FROM python:3.11-slim\nWORKDIR /app\nCOPY requirements.txt .\nRUN pip install -r requirements.txt\nCOPY . .\nCMD ["python", "app.py"]',
    ),
    ("Makefileを書いて", "build:\n\tgcc -o app main.c\n\nclean:\n\trm -f app"),
    ("Rubyで挨拶して", "def greet(name)\n  puts \"Hello, #{name}!\"\nend\n\ngreet('World')"),
    (
        "PHPで配列を出力して",
        "<?php\n$fruits = ['apple', 'banana'];\nforeach ($fruits as $f) {\n    echo $f . PHP_EOL;\n}\n?>",
    ),
    (
        "Kotlinでデータクラスを定義して",
        'data class User(val id: Int, val name: String)\n\nfun main() {\n    println(User(1, "Ann"))\n}',
    ),
    ("Swiftで配列をフィルタして", "let evens = numbers.filter { $0 % 2 == 0 }\nprint(evens)"),
    (
        "C#でリストを並べ替えて",
        "var sorted = people.OrderBy(p => p.Age).ToList();\nforeach (var p in sorted)\n{\n    Console.WriteLine(p.Name);\n}",
    ),
    (
        "gitコマンドで新しいブランチを作って",
        "git checkout -b feature/login\ngit push -u origin feature/login",
    ),
    (
        "curlでAPIを呼んで",
        "curl -X POST https://api.example.com/v1/items -H 'Content-Type: application/json' -d '{\"name\": \"pen\"}'",
    ),
    (
        "nginxの設定を書いて",
        "server {\n    listen 80;\n    server_name example.com;\n    location / {\n        proxy_pass http://127.0.0.1:8000;\n    }\n}",
    ),
    ("Pythonのワンライナーで", "print(sum(x * x for x in range(10)))"),
    ("Excelの数式で合計して", "=SUM(A1:A10)"),
    ("SQLで更新して", "UPDATE users SET active = 0 WHERE last_login < '2023-01-01';"),
    ("アセンブリで書いて", "mov eax, 1\nmov ebx, 0\nint 0x80"),
    (
        "Haskellで階乗",
        "factorial :: Integer -> Integer\nfactorial 0 = 1\nfactorial n = n * factorial (n - 1)",
    ),
]

# Japanese prose around unfenced code whose comments and strings hold English sentences: clean.
MIXED = [
    (
        "HTMLでボタンを作って",
        '以下のコードでボタンを作れます。\n<button type="button" onclick="alert(\'Hello, this is a test message for you!\')">Click me</button>\nクリックするとメッセージが表示されます。',
    ),
    (
        "Pythonで階乗を求めて",
        "再帰を使った例です。\n\ndef factorial(n):\n    # Return n! for a non-negative integer n.\n    if n == 0:\n        return 1\n    return n * factorial(n - 1)\n\nこの関数は n が 0 になるまで自分自身を呼び出します。",
    ),
    (
        "JavaScriptで配列の重複を除いて",
        "Set を使うと簡単です。\n\nconst unique = [...new Set(items)];\nconsole.log(unique); // This prints the unique items in the list.\n\nSet は同じ値を二度持たないためです。",
    ),
    (
        "SQLで集計して",
        "次のクエリで部署ごとの人数を数えます。\n\nSELECT department, COUNT(*) AS members\nFROM employees\nGROUP BY department;\n\nGROUP BY で部署ごとにまとめています。",
    ),
    (
        "シェルでファイル数を数えて",
        "次のコマンドを実行してください。\nls -1 | wc -l\nカレントディレクトリのファイル数が表示されます。",
    ),
    (
        "C言語で入力を読んで",
        'scanf を使います。\n#include <stdio.h>\nint main(void) {\n    int n;\n    printf("Please enter a number that is greater than zero: ");\n    scanf("%d", &n);\n    return 0;\n}\n入力された値が n に入ります。',
    ),
    (
        "JSONで返して",
        '結果は次のとおりです。\n{"status": "ok", "message": "The request was processed successfully."}\n以上です。',
    ),
    (
        "設定例を教えて",
        "YAML の設定例です。\nserver:\n  port: 8080\n  host: localhost\nlogging:\n  level: info\nポート番号は必要に応じて変更してください。",
    ),
]

# English prose: under a Japanese contract, not_japanese.
PROSE = [
    (
        "東京について教えて",
        "Tokyo is the capital of Japan and one of the largest cities in the world. It is known for its food, its trains and its many neighbourhoods.",
    ),
    (
        "光合成を説明して",
        "Photosynthesis is the process by which plants use sunlight, water and carbon dioxide to produce oxygen and energy in the form of sugar.",
    ),
    (
        "おすすめの本は？",
        "I would recommend reading a classic novel.\nThey are timeless, and they teach you a lot about people.",
    ),
    ("謝罪文を書いて", "I'm sorry for the late reply. I was away from my desk all afternoon."),
    (
        "健康的な食事とは",
        "A healthy diet includes:\n- fruits and vegetables\n- whole grains\n- lean protein\nTry to avoid sugary drinks and processed food.",
    ),
    (
        "旅行の計画を立てて",
        "Day 1: Arrive in Kyoto and visit Kiyomizu-dera.\nDay 2: Walk through Arashiyama in the morning, then see the golden pavilion.\nDay 3: Take the train to Nara and feed the deer.",
    ),
    (
        "違いを説明して",
        "The main difference is that a list is mutable, while a tuple cannot be changed after it is created.",
    ),
    (
        "要約して",
        "Summary: The company grew by 12% this year. Sales in Asia were strong, but costs also rose.",
    ),
    ("説明して", "Sure! Here's a quick explanation. When you heat water to 100 degrees, it starts to boil."),
    (
        "手紙を書いて",
        "Dear Mr. Smith,\n\nThank you for your letter of May 3. We are happy to confirm your booking for two nights.\n\nBest regards,\nAnna",
    ),
    ("アドバイスして", "You should get enough sleep, drink water, and take short breaks while working."),
    (
        "説明して",
        "In conclusion, the results show that the new method is faster and more accurate than the old one.",
    ),
    ("ポエムを書いて", "The moon rises slow\nover the quiet silver sea\nand the night is still"),
    ("教えて", "Yes, that's correct. The Earth orbits the Sun once every 365.25 days."),
    (
        "次に何をすべき？",
        "First, open the settings. Then choose the account tab and click on the button to save.",
    ),
]

# English prose with code-ish symbols (formulas, brackets, a path, a command): still prose.
PROSE_WITH_SYMBOLS = [
    ("計算して", "To solve it, we set x = 5 and y = 3; then x + y = 8, which is the answer."),
    ("説明して", "The function f(x) = x^2 + 1 is always positive, so it has no real roots."),
    ("説明して", "Use the {name} placeholder in your template; it will be replaced with the user's name."),
    ("説明して", "You can call print() to show a value, and len() returns the length of a list."),
    ("説明して", "The price is $20 per month (or $200 per year), which is cheaper than the other plan."),
    (
        "説明して",
        "Note: the file config.yaml must be in the same folder as the app, otherwise it will not start.",
    ),
    (
        "説明して",
        "Step 1: Install the package.\nStep 2: Run the setup script.\nStep 3: Restart your computer.",
    ),
    ("説明して", "The ratio is 3:2, i.e. for every three apples there are two oranges; see [1] for details."),
    ("説明して", "If a > b, then the first player wins; otherwise the second one does, as shown in Table 2."),
    (
        "説明して",
        "In C, a pointer holds an address; *p gives the value at that address and &x gives the address of x.",
    ),
    ("説明して", "Score = correct answers / total questions * 100, so 45 out of 50 gives 90 points."),
    ("説明して", 'Use git commit -m "message" to save your changes, and then push them to the remote.'),
    (
        "説明して",
        "# Introduction\nThis guide explains how to set up the project on your own computer.\n## Requirements\nYou need Python 3.11 and an internet connection.",
    ),
    ("説明して", "A = {1, 2, 3} and B = {3, 4}; their union is {1, 2, 3, 4} and their intersection is {3}."),
    ("説明して", "Good morning! The weather is fine today; it is a good day for a walk in the park."),
    (
        "説明して",
        "- Drink water every day.\n- Sleep at least seven hours.\n- Walk for thirty minutes after lunch.",
    ),
    ("説明して", "Name: John Smith\nAge: 32\nHobby: He likes to play tennis with his friends on weekends."),
    ("説明して", "Q: What is the capital of France?\nA: The capital of France is Paris."),
    (
        "説明して",
        "You can find more at https://example.com/docs, where the whole API is described in detail.",
    ),
    ("説明して", 'The result is {"ok": true}, which means that the request was accepted by the server.'),
    (
        "説明して",
        "Pros:\n* fast to write\n* easy to read\nCons:\n* slow at run time, because it is interpreted",
    ),
    (
        "説明して",
        '1) Open the app.\n2) Tap the menu (top left).\n3) Choose "Settings" -> "Account" and log out.',
    ),
    (
        "説明して",
        "Use <strong>bold</strong> for the names of the products that you want to stress in the text.",
    ),
    ("説明して", "Title: My Summer\nI went to the sea with my family, and we swam every day."),
    ("説明して", "x = 3 is the only answer, because 2x + 4 = 10 gives 2x = 6 and so x = 3."),
    (
        "説明して",
        "| Pros | Cons |\n|---|---|\n| It is easy to use for everyone | It is too expensive for most people |",
    ),
    (
        "説明して",
        "name,comment\nAnn,I think that the product is very good\nBob,It was not what I wanted at all",
    ),
]

# Japanese prose with English prose sentences: broken_language_mix.
MIX = [
    (
        "説明して",
        "東京は日本の首都です。\nIt is also one of the most visited cities in the world, with many temples.",
    ),
    (
        "説明して",
        "以下のとおりです。\nThe answer is that you should restart the server; then it will work again.\n以上です。",
    ),
]


def _verdict(prompt: str, answer: str) -> tuple[str, ...]:
    result = check(answer, CONTRACT, prompt=prompt)
    assert result.check_errors == ()
    return result.violation_types


@pytest.mark.parametrize(("prompt", "answer"), CODE + MIXED)
def test_bare_code_and_data_have_no_language(prompt: str, answer: str) -> None:
    assert _verdict(prompt, answer) == ()


@pytest.mark.parametrize(("prompt", "answer"), PROSE + PROSE_WITH_SYMBOLS)
def test_english_prose_is_not_japanese_whatever_symbols_it_holds(prompt: str, answer: str) -> None:
    assert _verdict(prompt, answer) == ("not_japanese",)


@pytest.mark.parametrize(("prompt", "answer"), MIX)
def test_english_sentences_in_a_japanese_answer_are_a_mix(prompt: str, answer: str) -> None:
    assert _verdict(prompt, answer) == ("broken_language_mix",)


def test_the_html_one_liner_of_the_issue_is_code() -> None:
    answer = '<button type="button" onclick="alert(\'hi\')">Click me</button>'
    assert _verdict("HTMLでボタンを作って", answer) == ()
    assert profile(answer).primary == "code"


def test_an_english_paragraph_in_tags_is_still_english() -> None:
    answer = "<p>This paragraph explains the whole design of the system in plain English words.</p>"
    assert _verdict("説明して", answer) == ("not_japanese",)


def test_an_english_sentence_is_words_in_a_row_with_english_grammar() -> None:
    assert _has_sentence("the value is null")
    assert _has_sentence("Open the app.")
    assert not _has_sentence("N=1 to 5; a=0 to pi")  # math: operators between the words
    assert not _has_sentence("GROUP BY name ORDER BY total")  # keywords and identifiers, no grammar
    assert not _has_sentence("Click me")  # two words: a label


def test_each_reader_tells_its_format() -> None:
    """The parsers and lexers one by one, with prose of the same shape beside each."""
    sentence = _has_sentence
    assert _code._is_toml('[server]\nport = 8080\nhost = "0.0.0.0"')
    assert not _code._is_toml("The answer = 42, because it is.")
    assert _code._is_ini("[general]\nname = My App\nlevel = debug")
    assert _code._is_yaml("server:\n  port: 8080\nlogging:\n  level: info", sentence)
    assert not _code._is_yaml("Note: the file must be here.\nTip: it will not start otherwise.", sentence)
    assert not _code._is_yaml("Step 1: Install it.\nStep 2: Run it.", sentence)  # keys are no identifiers
    assert _code._is_table("id,name\n1,Apple\n2,Pear", sentence)
    assert not _code._is_table("name,comment\nAnn,I think that the product is very good", sentence)
    assert _code._is_table("| a | b |\n|---|---|\n| 1 | 2 |", sentence)
    assert _code._is_markup("<ul>\n  <li>One</li>\n  <li>Two</li>\n</ul>", sentence)
    assert _code._is_diff("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n+c")
    assert not _code._is_diff("- Drink water.\n- Sleep well.")
    assert _code._is_records("2024-05-01 12:00:01 INFO start\n2024-05-01T12:00:02 WARN slow")
    assert not _code._is_records("2024 was a good year.\n2025 will be better.")
    assert _code._is_lexed_code(
        "const total = items.reduce((a, b) => a + b, 0);", sentence, [_code.TOKEN_BUDGET]
    )
    assert not _code._is_lexed_code(
        "Use the reduce() method to add up all of the items in a list.", sentence, [_code.TOKEN_BUDGET]
    )


def test_a_string_that_opens_inside_a_word_is_an_apostrophe_of_prose() -> None:
    assert not _code._is_lexed_code(
        "Sure! Here's the plan: we'll meet at (10:00) {room 2}.", _has_sentence, [_code.TOKEN_BUDGET]
    )


def test_every_reader_sees_a_bounded_text() -> None:
    """A huge block is prose to the readers (one bounded pass), and the lexers read a bounded beginning
    and a bounded number of tokens: the cost of a check stays linear in the output."""
    huge = "x = 1;\n" * (_code.MAX_CODE_CHARS // 7 + 1)
    assert len(huge.strip()) > _code.MAX_CODE_CHARS
    assert not _code.is_code(huge, _has_sentence)
    seen: list[int] = []

    class Recording:
        def get_tokens(self, text: str):
            seen.append(len(text))
            from pygments.token import Name, Text

            for _ in range(_code.TOKEN_BUDGET + 10):
                yield Name, "a"
                yield Text, " "

    budget = [_code.TOKEN_BUDGET]
    assert not _code._reads_as_code("a " * 5000, Recording(), _has_sentence, budget)
    assert budget[0] < 0
    text = "a(b) " * 2000
    original = _code._lexers
    try:
        _code._lexers = lambda: (Recording(),)  # type: ignore[assignment]
        _code._is_lexed_code(text, _has_sentence, [_code.TOKEN_BUDGET])
    finally:
        _code._lexers = original
    assert seen[-1] == _code._LEXED_CHARS


def test_a_text_of_many_short_blocks_judges_a_bounded_number_of_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten thousand kana-less paragraphs between Japanese lines: at most _MAX_BLOCKS are judged."""
    from tallyspan._engine import _language

    judged: list[str] = []

    def counting(block: str, has_sentence: object, budget: object = None) -> bool:
        judged.append(block)
        return False

    monkeypatch.setattr(_language, "is_code", counting)
    text = "日本語の説明です。\n" + "Q:\n\n" * 10_000
    profile(text)
    assert len(judged) == _language._MAX_BLOCKS


def test_code_the_question_did_not_ask_for_is_judged_as_text() -> None:
    """DEFINITIONS.md: code is clean when it is "of the kind the question asked for". A program dumped in
    answer to another question (off_topic) is text: its English comments make it not_japanese."""
    dump = (
        "/* Licensed under the Apache License, Version 2.0 (the License); you may not use this file except\n"
        "   in compliance with the License. You may obtain a copy of the License at the address below. */\n\n"
        "#include <string>\n\nnamespace app {\n\nvoid SetLevel(int level) {\n  if (level != 0) {\n"
        "    return;\n  }\n  g_level = level;\n}\n\n}  // namespace app\n"
    )
    # Not judged off topic (no prompt known): code, no language.
    alone = check(dump, CONTRACT)
    assert (alone.violation_types, alone.check_errors) == ((), ())
    other = check(
        dump,
        CONTRACT,
        prompt="京都でおすすめの観光地を三つ、理由とともに教えてください。",
        other_prompts=["富士山の高さを教えてください。"],
    )
    assert other.violation_types == ("not_japanese", "off_topic")
