"""Self-check questions with immediate feedback, for the lesson notebooks.

Answers and explanations are stored encoded, so the notebook never shows the correct answer in plain
text before the student tries. Encoding is not security (anyone can decode it); it only keeps the
answer out of sight. To write a question, encode its answer and explanation once:

    python -m trainkit.selfcheck "b" "Because ..."

and paste the printed strings into ``choice(...)`` or ``number(...)`` in the notebook.
In JupyterLab the question renders as a widget (options, a Check button, a Reveal button); anywhere
else, call ``q.check(answer)``, which prints the same feedback and returns True or False.
"""
from __future__ import annotations

import base64
import math
import sys
import zlib


def encode(text: str) -> str:
    """Hide a string from casual reading (reversible with ``decode``)."""
    return base64.b64encode(zlib.compress(text.encode("utf-8"))).decode("ascii")


def decode(token: str) -> str:
    return zlib.decompress(base64.b64decode(token.encode("ascii"))).decode("utf-8")


class Question:
    """Base class: subclasses define ``_is_correct`` and ``_widget_input``."""

    def __init__(self, prompt: str, answer: str, explanation: str = ""):
        self.prompt = prompt
        self._answer = answer
        self._explanation = explanation
        self.attempts = 0

    def _is_correct(self, value) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def _feedback(self, value) -> tuple[bool, str]:
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

    def _ipython_display_(self):
        try:
            import ipywidgets as widgets
            from IPython.display import display
        except ImportError:  # plain IPython: fall back to text
            print(self.prompt + "\n(call .check(answer) on this question to check an answer)")
            return
        value_widget = self._widget_input(widgets)
        check = widgets.Button(description="Check", button_style="primary")
        show = widgets.Button(description="Reveal")
        out = widgets.Output()

        def on_check(_):
            out.clear_output()
            with out:
                value = value_widget.value
                if value is None:
                    print("Pick or type an answer first.")
                    return
                print(self._feedback(value)[1])

        def on_reveal(_):
            out.clear_output()
            with out:
                print(self.reveal())

        check.on_click(on_check)
        show.on_click(on_reveal)
        display(widgets.VBox([widgets.HTML(f"<b>{self.prompt}</b>"), value_widget,
                              widgets.HBox([check, show]), out]))


class Choice(Question):
    """Multiple choice: ``answer`` is the encoded letter of the correct option ("a", "b", ...)."""

    def __init__(self, prompt: str, options: list[str], answer: str, explanation: str = ""):
        super().__init__(prompt, answer, explanation)
        self.options = list(options)
        self.letters = [chr(ord("a") + i) for i in range(len(self.options))]
        if decode(answer) not in self.letters:
            raise ValueError(f"encoded answer must be one of {self.letters}")

    def _label(self, letter: str) -> str:
        return f"{letter}) {self.options[self.letters.index(letter)]}"

    def _is_correct(self, value) -> bool:
        letter = str(value).strip().lower()[:1]
        return letter == decode(self._answer)

    def _reveal_answer(self) -> str:
        return self._label(decode(self._answer))

    def _widget_input(self, widgets):
        return widgets.RadioButtons(options=[(self._label(l), l) for l in self.letters], value=None,
                                    layout=widgets.Layout(width="max-content"))


class Number(Question):
    """Numeric answer, correct within a relative tolerance: ``answer`` is the encoded number."""

    def __init__(self, prompt: str, answer: str, rel_tol: float = 0.05, explanation: str = ""):
        super().__init__(prompt, answer, explanation)
        self.rel_tol = rel_tol
        float(decode(answer))  # fail early on a malformed question

    def _is_correct(self, value) -> bool:
        try:
            value = float(value)
        except (TypeError, ValueError):
            return False
        return math.isclose(value, float(decode(self._answer)), rel_tol=self.rel_tol)

    def _reveal_answer(self) -> str:
        return decode(self._answer)

    def _widget_input(self, widgets):
        return widgets.FloatText(value=None, description="answer")


def choice(prompt: str, options: list[str], answer: str, explanation: str = "") -> Choice:
    return Choice(prompt, options, answer, explanation)


def number(prompt: str, answer: str, rel_tol: float = 0.05, explanation: str = "") -> Number:
    return Number(prompt, answer, rel_tol, explanation)


if __name__ == "__main__":  # python -m trainkit.selfcheck "answer" ["explanation"]
    for arg in sys.argv[1:]:
        print(repr(encode(arg)))
