"""Self-check questions with immediate feedback, for the lesson notebooks.

A question names its answer by a short key; the answer and its explanation live in an answer file,
``trainkit/answers/NN.json`` (NN: the lesson's number), so the question cell stays short and never shows
the answer. The file stores them encoded: encoding is not security (anyone can decode it), it only keeps
the answer out of sight until the student has tried. To write question 3 of lesson 01:

    python -m trainkit.selfcheck set 01.3 "0.0041" "Because ..."       # writes trainkit/answers/01.json
    python -m trainkit.selfcheck show 01.3                              # reads it back

and in the notebook: ``selfcheck.number("3. What is ...?", key="01.3", rel_tol=0.03)``. Questions are
numbered from 1 in each lesson, and the number in the prompt is the number in the key.

In JupyterLab the question renders as a widget (options or a text box, a Check button, a Reveal button); an
empty answer is never counted as an attempt. In a static HTML page of an executed lesson (``make site``) the same
output shows the question with a "Show answer" reveal. Anywhere else, call ``q.check(answer)``, which prints the
same feedback and returns True or False.

The older form, with the encoded strings in the call (``answer="eJx...", explanation="eJx..."``), still works.
"""
from __future__ import annotations

import base64
import html
import json
import math
import re
import sys
import zlib
from pathlib import Path

ANSWERS = Path(__file__).with_name("answers")
KEY = re.compile(r"^(\d{2})\.([1-9]\d*)$")


def encode(text: str) -> str:
    """Hide a string from casual reading (reversible with ``decode``)."""
    return base64.b64encode(zlib.compress(text.encode("utf-8"))).decode("ascii")


def decode(token: str) -> str:
    return zlib.decompress(base64.b64decode(token.encode("ascii"))).decode("utf-8")


def _answer_file(key: str) -> tuple[Path, str]:
    match = KEY.match(key)
    if not match:
        raise ValueError(f"a self-check key is 'NN.n' (lesson number, question number from 1), got {key!r}")
    return ANSWERS / f"{match.group(1)}.json", match.group(2)


def lookup(key: str) -> tuple[str, str]:
    """The encoded (answer, explanation) stored for ``key`` ("NN.n")."""
    path, number = _answer_file(key)
    entries = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    if number not in entries:
        raise KeyError(f"no answer stored for self-check {key!r} in {path.name}; "
                       f"write one with: python -m trainkit.selfcheck set {key} ANSWER EXPLANATION")
    entry = entries[number]
    return entry["answer"], entry.get("explanation", "")


def store(key: str, answer: str, explanation: str = "") -> Path:
    """Write the answer and explanation of ``key`` ("NN.n") into its lesson's answer file (encoded)."""
    path, number = _answer_file(key)
    entries = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    entries[number] = {"answer": encode(answer), "explanation": encode(explanation) if explanation else ""}
    path.parent.mkdir(parents=True, exist_ok=True)
    ordered = dict(sorted(entries.items(), key=lambda kv: int(kv[0])))
    path.write_text(json.dumps(ordered, indent=1) + "\n", encoding="utf-8")
    return path


def _is_empty(value) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


class Question:
    """Base class: subclasses define ``_is_correct``, ``_invalid``, ``_reveal_answer`` and ``_widget_input``."""

    def __init__(self, prompt: str, answer: str | None = None, explanation: str = "", key: str | None = None):
        if key is not None:
            if answer is not None:
                raise TypeError("give either key= (answer file) or answer= (encoded string), not both")
            answer, explanation = lookup(key)
        if answer is None:
            raise TypeError("a question needs key='NN.n' (or the older encoded answer=...)")
        self.prompt = prompt
        self.key = key
        self._answer = answer
        self._explanation = explanation
        self.attempts = 0

    def _is_correct(self, value) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def _invalid(self, value) -> str | None:
        """Why ``value`` is not an answer at all (then it does not count as an attempt), or None."""
        return "Pick or type an answer first." if _is_empty(value) else None

    def _feedback(self, value) -> tuple[bool, str]:
        problem = self._invalid(value)
        if problem:
            return False, problem
        self.attempts += 1
        if self._is_correct(value):
            text = "Correct."
            if self._explanation:
                text += " " + decode(self._explanation)
            return True, text
        return False, f"Not quite (attempt {self.attempts}): think again, or press Reveal."

    def check(self, value) -> bool:
        """Check an answer without widgets; prints the feedback and returns whether it was right."""
        ok, text = self._feedback(value)
        print(text)
        return ok

    def reveal(self) -> str:
        return f"Answer: {self._reveal_answer()}. " + (decode(self._explanation) if self._explanation else "")

    def _reveal_answer(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _choices_text(self) -> list[str]:
        return []

    def _text(self) -> str:
        lines = [self.prompt, *self._choices_text(), "(call .check(answer) on this question to check an answer)"]
        return "\n".join(lines)

    def _html(self) -> str:
        """A static rendering: the question, its options and a reveal (for HTML pages without a kernel)."""
        esc = html.escape
        options = "".join(f"<li>{esc(line)}</li>" for line in self._choices_text())
        explanation = decode(self._explanation) if self._explanation else ""
        return (
            '<div class="selfcheck" style="border:1px solid #c8d3e0;border-radius:6px;padding:0.6em 1em;'
            'margin:0.4em 0;background:#f7f9fc">'
            f"<p><b>{esc(self.prompt)}</b></p>"
            + (f'<ul style="list-style:none;padding-left:0.5em">{options}</ul>' if options else "")
            + '<details><summary style="cursor:pointer;color:#1a5fb4">Show answer</summary>'
            f"<p><b>Answer:</b> {esc(self._reveal_answer())}</p>"
            + (f"<p>{esc(explanation)}</p>" if explanation else "")
            + "</details></div>"
        )

    def _repr_html_(self) -> str:
        return self._html()

    def _ipython_display_(self):
        try:
            import ipywidgets as widgets
            from IPython.display import display
        except ImportError:  # plain IPython: fall back to text
            print(self._text())
            return
        value_widget = self._widget_input(widgets)
        check = widgets.Button(description="Check", button_style="primary")
        show = widgets.Button(description="Reveal")
        out = widgets.Output()

        def on_check(_):
            out.clear_output()
            with out:
                print(self._feedback(value_widget.value)[1])

        def on_reveal(_):
            out.clear_output()
            with out:
                print(self.reveal())

        check.on_click(on_check)
        show.on_click(on_reveal)
        box = widgets.VBox([widgets.HTML(f"<b>{html.escape(self.prompt)}</b>"), value_widget,
                            widgets.HBox([check, show]), out])
        # One output, three forms: JupyterLab shows the live widget; a page without a kernel (nbconvert's HTML
        # of an executed lesson) shows the static question with a "Show answer" reveal; a terminal shows text.
        bundle = dict(box._repr_mimebundle_())
        bundle["text/html"] = self._html()
        bundle["text/plain"] = self._text()
        display(bundle, raw=True)


class Choice(Question):
    """Multiple choice: the stored answer is the letter of the correct option ("a", "b", ...)."""

    def __init__(self, prompt: str, options: list[str], answer: str | None = None, explanation: str = "",
                 key: str | None = None):
        super().__init__(prompt, answer, explanation, key)
        self.options = list(options)
        self.letters = [chr(ord("a") + i) for i in range(len(self.options))]
        if decode(self._answer) not in self.letters:
            raise ValueError(f"the stored answer of {key or prompt!r} must be one of {self.letters}")

    def _label(self, letter: str) -> str:
        return f"{letter}) {self.options[self.letters.index(letter)]}"

    def _choices_text(self) -> list[str]:
        return [self._label(letter) for letter in self.letters]

    def _invalid(self, value) -> str | None:
        if _is_empty(value):
            return "Pick an answer first."
        if str(value).strip().lower()[:1] not in self.letters:
            return f"Answer with one of the letters {', '.join(self.letters)}."
        return None

    def _is_correct(self, value) -> bool:
        letter = str(value).strip().lower()[:1]
        return letter == decode(self._answer)

    def _reveal_answer(self) -> str:
        return self._label(decode(self._answer))

    def _widget_input(self, widgets):
        return widgets.RadioButtons(options=[(self._label(letter), letter) for letter in self.letters], value=None,
                                    layout=widgets.Layout(width="max-content"))


class Number(Question):
    """Numeric answer, correct within a relative tolerance: the stored answer is the number."""

    def __init__(self, prompt: str, answer: str | None = None, rel_tol: float = 0.05, explanation: str = "",
                 key: str | None = None):
        super().__init__(prompt, answer, explanation, key)
        self.rel_tol = rel_tol
        try:
            float(decode(self._answer))
        except ValueError:  # fail early on a malformed question
            raise ValueError(f"the stored answer of {key or prompt!r} must be a number") from None

    def _invalid(self, value) -> str | None:
        if _is_empty(value):
            return "Type a number first."
        try:
            float(value)
        except (TypeError, ValueError):
            return f"{value!r} is not a number: type one such as 0.02 or 1.5e-3."
        return None

    def _is_correct(self, value) -> bool:
        return math.isclose(float(value), float(decode(self._answer)), rel_tol=self.rel_tol)

    def _reveal_answer(self) -> str:
        return decode(self._answer)

    def _widget_input(self, widgets):
        # A text box, not FloatText: it starts empty (FloatText shows 0, which Check would count as an answer).
        return widgets.Text(value="", placeholder="a number, e.g. 0.02 or 1.5e-3", description="answer")


def choice(prompt: str, options: list[str], answer: str | None = None, explanation: str = "", *,
           key: str | None = None) -> Choice:
    return Choice(prompt, options, answer, explanation, key=key)


def number(prompt: str, answer: str | None = None, rel_tol: float = 0.05, explanation: str = "", *,
           key: str | None = None) -> Number:
    return Number(prompt, answer, rel_tol, explanation, key=key)


def _main(argv: list[str]) -> int:
    usage = ("usage: python -m trainkit.selfcheck set NN.n ANSWER [EXPLANATION]   (write the answer file)\n"
             "       python -m trainkit.selfcheck show NN.n                       (read it back)\n"
             "       python -m trainkit.selfcheck encode TEXT...                  (old form: print encoded strings)")
    if argv[:1] == ["set"] and len(argv) in (3, 4):
        print(f"wrote {argv[1]} into {store(*argv[1:])}")
    elif argv[:1] == ["show"] and len(argv) == 2:
        answer, explanation = lookup(argv[1])
        print(f"answer: {decode(answer)}\nexplanation: {decode(explanation) if explanation else ''}")
    elif argv and argv[0] not in ("set", "show"):  # the old form: encode each argument
        for arg in argv[1:] if argv[0] == "encode" else argv:
            print(repr(encode(arg)))
    else:
        print(usage, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
