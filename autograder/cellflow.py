"""Which later cells of a notebook can see a change in some of its cells: a data-flow over the names cells bind.

The catalogue (tests/test_catalogue.py) grades each wrong answer by running the notebook on from the answer's cell;
a test cell that reads nothing the answer's cell bound, directly or through cells that did, computes what it
computes for the reference, so it need not run. A cell is *affected* when one of its top-level statements reads
(in itself or in the functions and classes it defines) a name that the changed cells or an affected statement
bound; a statement that rebinds a name for sure with an unaffected value ends that name's taint. Names only, at
cell granularity: the ways around it are state outside the namespace (a module attribute, a global torch flag,
an object mutated in place) and dynamic lookups (``globals()``, ``get_ipython``); ``PrefixGrader`` checks the
first with a fingerprint and treats cells that do the second as affected.
"""
from __future__ import annotations

import ast

FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _stored(node):
    """Every name a node may bind in the scope it runs in (not inside nested functions, but their own names)."""
    out = set()
    def visit(n):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.id)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).split('.')[0])
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
        elif isinstance(n, ast.Global):
            out.update(n.names)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
            for sub in ast.walk(n):
                if isinstance(sub, ast.Global):
                    out.update(sub.names)
            for d in n.decorator_list:
                visit(d)
            return
        if isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return
        for child in ast.iter_child_nodes(n):
            visit(child)
    visit(node)
    return out


def _loads(node, local):
    """Names an expression or a nested scope reads from the notebook's namespace (``local``: bound names)."""
    out = set()
    def visit(n, local):
        if isinstance(n, FUNCS):
            args = n.args
            params = {a.arg for a in args.args + args.posonlyargs + args.kwonlyargs}
            params |= {a.arg for a in (args.vararg, args.kwarg) if a}
            for d in getattr(n, 'decorator_list', []) + args.defaults + [d for d in args.kw_defaults if d]:
                visit(d, local)
            body = n.body if isinstance(n.body, list) else [n.body]
            inner = params | set().union(set(), *[_stored(b) for b in body])
            globs = {g for b in body for s in ast.walk(b) if isinstance(s, ast.Global) for g in s.names}
            for b in body:
                visit(b, ((local | inner) - globs) | {'__class__'})
            return
        if isinstance(n, ast.ClassDef):
            for d in n.decorator_list + n.bases + [k.value for k in n.keywords]:
                visit(d, local)
            for b in n.body:
                visit(b, local)
            return
        if isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            targets = set().union(*[_stored(g.target) for g in n.generators])
            for child in ast.iter_child_nodes(n):
                visit(child, local | targets)
            return
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in local:
            out.add(n.id)
        for child in ast.iter_child_nodes(n):
            visit(child, local)
    visit(node, set(local))
    return out


def _block(stmts, sure):
    """(uses, names surely bound after it) of a statement list run in order, given names surely bound before."""
    uses, sure = set(), set(sure)
    for s in stmts:
        u, sure = _stmt(s, sure)
        uses |= u
    return uses, sure


def _stmt(s, sure):
    if isinstance(s, (ast.With, ast.AsyncWith)):
        uses = set().union(*[_loads(i.context_expr, sure) for i in s.items])
        inner = sure | set().union(*[_stored(i.optional_vars) for i in s.items if i.optional_vars])
        u, after = _block(s.body, inner)
        return uses | u, after
    if isinstance(s, ast.If):
        uses = _loads(s.test, sure)
        u1, a1 = _block(s.body, sure)
        u2, a2 = _block(s.orelse, sure)
        return uses | u1 | u2, sure | (a1 & a2)
    if isinstance(s, (ast.For, ast.AsyncFor)):
        uses = _loads(s.iter, sure)
        u1, _ = _block(s.body, sure | _stored(s.target))
        u2, _ = _block(s.orelse, sure)
        return uses | u1 | u2, sure
    if isinstance(s, ast.While):
        u1, _ = _block(s.body, sure)
        u2, _ = _block(s.orelse, sure)
        return _loads(s.test, sure) | u1 | u2, sure
    if isinstance(s, ast.Try):
        u, after = _block(s.body, sure)
        for h in s.handlers:
            hu, _ = _block(h.body, sure | ({h.name} if h.name else set()))
            u |= hu | (_loads(h.type, sure) if h.type else set())
        ou, _ = _block(s.orelse, after)
        fu, _ = _block(s.finalbody, sure)
        return u | ou | fu, sure
    uses = _loads(s, sure)
    # an augmented assignment reads its target too (its Name has the Store context only)
    if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and s.target.id not in sure:
        uses.add(s.target.id)
    bound = _stored(s)
    surely = isinstance(s, (ast.Assign, ast.AugAssign, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import,
                            ast.ImportFrom)) or (isinstance(s, ast.AnnAssign) and s.value is not None)
    return uses, sure | bound if surely else sure


def statements(source: str) -> list[tuple[set, set, set]]:
    """[(uses, binds, surely binds)] per top-level statement of a cell."""
    out, sure = [], set()
    for s in ast.parse(source).body:
        uses, after = _stmt(s, sure)
        out.append((uses, _stored(s), after - sure))
        sure = after
    return out


def _callables(source: str) -> list[tuple[set, set]]:
    """[(names read when called, names bound)] per top-level statement of a cell that defines a function, a class or
    a lambda: what it reads is read again at every call, whenever that is."""
    out = []
    for s, (uses, binds, _) in zip(ast.parse(source).body, statements(source)):
        if any(isinstance(n, FUNCS + (ast.ClassDef,)) for n in ast.walk(s)):
            out.append((uses, binds))
    return out


def affected_cells(sources: list[str], changed: set[int]) -> set[int]:
    """Indices of the cells from the first changed one on whose result can depend on the changed cells: a cell is
    affected when one of its statements reads a name that a changed or affected statement bound. A function or class
    reads its names when it is called, not when it is defined: once a name it reads is tainted, so is the name it is
    bound to, wherever it was defined (a helper defined before the changed cell that calls the changed function)."""
    first = min(changed)
    tainted, hit = set(), set()
    try:
        callables = [c for i in range(len(sources)) for c in _callables(sources[i])]
    except SyntaxError:
        return set(range(first, len(sources)))

    def spread():
        grew = True
        while grew:
            grew = False
            for uses, binds in callables:
                if uses & tainted and not binds <= tainted:
                    tainted.update(binds)
                    grew = True

    for i in range(first, len(sources)):
        if 'globals()' in sources[i] or 'get_ipython' in sources[i]:
            hit.add(i)
        flow = statements(sources[i])
        for uses, binds, surely in flow:
            if i in changed or uses & tainted:
                hit.add(i)
                tainted |= binds
                spread()
            else:
                tainted -= surely
    return hit
