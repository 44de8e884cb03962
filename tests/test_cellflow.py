"""The data-flow that lets the catalogue stop a variant after the last cell its change can reach.

Two halves: ``autograder.cellflow`` on small cell lists (what counts as reading a changed name), and
``PrefixGrader(skip_unaffected=True)`` on a small notebook, including a variant whose change escapes the names (it
patches a module attribute when called), which must then run to the end.
"""
from __future__ import annotations

import nbformat
import pytest

from autograder import notebooks as nbu
from autograder.cellflow import affected_cells


def affected(*cells, changed=(0,)):
    return sorted(affected_cells(list(cells), set(changed)))


def test_a_cell_that_reads_a_changed_name_is_affected_and_one_that_does_not_is_not():
    assert affected("def f(): return 1", "assert f() == 1", "assert 2 == 2") == [0, 1]


def test_the_taint_flows_through_functions_and_classes_that_call_the_changed_code():
    cells = ["def f(): return 1", "def g():\n    return f() + 1", "class C:\n    def m(self):\n        return g()",
             "assert C().m() == 2", "def h(): return 3", "assert h() == 3"]
    assert affected(*cells) == [0, 1, 2, 3]


def test_a_function_defined_before_the_change_reads_the_changed_name_when_it_is_called():
    """A checks cell that defines `report()` calling `f` comes before the student's `f`; a later test cell that calls
    report() reads the changed f, and so does one that calls a helper defined after the change but before `f` was
    tainted there."""
    cells = ["def report(): return f()", "def f(): return 1", "def later(): return g()", "g = f",
             "assert report() == 1", "assert later() == 1", "assert 2 == 2"]
    assert affected(*cells, changed=(1,)) == [1, 3, 4, 5]


def test_names_a_cell_binds_before_reading_them_are_its_own():
    cells = ["x = 1\ntmp = 2", "import tempfile\nwith tempfile.TemporaryDirectory() as tmp:\n    assert tmp",
             "x = 5\nassert x == 5", "for i in range(3):\n    y = i\nassert i >= 0",
             "try:\n    pass\nexcept ValueError as err:\n    print(err)",
             "def k(a, *b, c=1, **d):\n    local = a\n    def inner():\n        return local + c\n    return inner",
             "print([tmp for tmp in range(2)])"]
    assert affected(*cells) == [0]


def test_a_sure_rebinding_ends_the_taint_and_a_conditional_one_does_not():
    assert affected("x = 1", "x = 2", "assert x == 2") == [0]
    assert affected("x = 1", "if False:\n    x = 2", "assert x") == [0, 2]
    assert affected("x = 1", "x += 1", "assert x") == [0, 1, 2]


def test_dynamic_lookups_and_unparsable_cells_count_as_affected():
    assert affected("x = 1", "print(globals()['x'])") == [0, 1]
    assert affected("x = 1", "get_ipython().run_cell('x')") == [0, 1]
    assert affected("x = 1", "def (:", "y = 2") == [0, 1, 2]


def _notebook(*cells):
    """A tiny source notebook: (kind, grade_id, source) with kind 'setup', 'solution' or 'test'."""
    nb = nbformat.v4.new_notebook()
    for kind, gid, src in cells:
        meta = {"grade": kind == "test", "grade_id": gid, "locked": kind != "solution", "schema_version": 3,
                "solution": kind == "solution"}
        if kind == "test":
            meta["points"] = 1
        nb.cells.append(nbformat.v4.new_code_cell(src, metadata={"nbgrader": meta}))
    return nb


NB = _notebook(("setup", "setup", "import math"),
               ("solution", "one", "def one():\n    return 1"),
               ("test", "test_one", "assert one() == 1"),
               ("solution", "two", "def two():\n    return 2"),
               ("test", "test_two", "assert two() == 2\nassert math.sqrt(4) == 2"))


@pytest.fixture(scope="module")
def grader():
    g = nbu.PrefixGrader(NB)
    yield g
    g.close()


def test_a_variant_stops_after_the_last_cell_it_can_reach(grader):
    scores = grader.grade({"one": "def one():\n    return 0"}, skip_unaffected=True)
    assert scores == {"test_one": (0.0, 1.0)} and grader.skipped == ["test_two"]
    assert grader.grade({"one": "def one():\n    return 0"}) == {"test_one": (0.0, 1.0), "test_two": (1.0, 1.0)}
    assert grader.skipped == []


def test_a_variant_that_changes_a_module_behind_the_names_runs_to_the_end(grader):
    patches = "def one():\n    import math\n    math.sqrt = lambda x: 0.0\n    return 0"
    assert grader.grade({"one": patches}, skip_unaffected=True) == {"test_one": (0.0, 1.0), "test_two": (0.0, 1.0)}
    assert grader.skipped == []


def test_the_forked_scores_are_those_of_a_fresh_kernel(grader):
    variant = {"two": "def two():\n    return 3"}
    assert grader.grade(variant) == nbu.quick_grade(NB, variant) == {"test_one": (1.0, 1.0), "test_two": (0.0, 1.0)}


def test_stopping_at_the_first_lost_points_leaves_out_only_that_exercises_later_test_cells():
    """With stop_at_first_failure the run ends at an own-exercise test cell that lost points, if nothing but own
    test cells remains needed; a later exercise that reads the changed code still runs."""
    independent = _notebook(("setup", "setup", "import math"),
                            ("solution", "one", "def one():\n    return 1"),
                            ("test", "test_one__a", "assert one() == 1"),
                            ("test", "test_one__b", "assert one() > 0"),
                            ("solution", "two", "def two():\n    return 2"),
                            ("test", "test_two", "assert two() == 2"))
    reads_one = _notebook(*[("setup", "setup", "import math"), ("solution", "one", "def one():\n    return 1"),
                            ("test", "test_one__a", "assert one() == 1"), ("test", "test_one__b", "assert one() > 0"),
                            ("solution", "two", "def two():\n    return one() + 1"),
                            ("test", "test_two", "assert two() == 2")])
    bug = {"one": "def one():\n    return 0"}
    g = nbu.PrefixGrader(independent)
    try:
        assert g.grade(bug, skip_unaffected=True, stop_at_first_failure=True) == {"test_one__a": (0.0, 1.0)}
        assert (g.unscored, g.skipped) == (["test_one__b"], ["test_two"])
        late = {"one": "def one():\n    return 1 if math.pi else 0\nassert True"}    # passes both: nothing left out
        assert g.grade(late, skip_unaffected=True, stop_at_first_failure=True) == {
            "test_one__a": (1.0, 1.0), "test_one__b": (1.0, 1.0)} and g.unscored == []
    finally:
        g.close()
    g = nbu.PrefixGrader(reads_one)
    try:
        assert g.grade(bug, skip_unaffected=True, stop_at_first_failure=True) == {
            "test_one__a": (0.0, 1.0), "test_one__b": (0.0, 1.0), "test_two": (0.0, 1.0)}
        assert (g.unscored, g.skipped) == ([], [])
    finally:
        g.close()
    with pytest.raises(ValueError, match="needs skip_unaffected"):
        g.grade(bug, stop_at_first_failure=True)
