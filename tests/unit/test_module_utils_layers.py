# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The module_utils layers (docs/development.md, "module_utils layers"), checked on the source.

Every plugins/**/*.py is parsed with ``ast`` (imports inside functions count): the imports between
module_utils modules run downward only and form no cycle, the bottom layer imports nothing of the
collection, no module_utils imports a plugin (filter, module, action, lookup: they are not shipped to
managed hosts), every imported module_utils exists, and nothing loads a module by a string. The
drawing in docs/development.md is held to LAYERS and to the imports found.
"""
import ast
import glob
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGINS = os.path.join(REPO, "plugins")
MODULE_UTILS = os.path.join(PLUGINS, "module_utils")
DEVELOPMENT_MD = os.path.join(REPO, "docs", "development.md")
COLLECTION = "ansible_collections.kvshare.dynamo"
MU_PACKAGE = COLLECTION + ".plugins.module_utils"

# The one layer table, bottom first; the labels are the drawing's. A module imports from its own
# layer or a lower one; the bottom imports nothing of the collection.
LAYERS = (
    ("bottom (import nothing of ours)", (
        "ports", "stack", "maru", "prometheus_text", "unit_watch", "topology", "devdax", "rdma_ucx", "pki",
        "controller_collections", "kvcr_rdma", "kvcr_process", "etcd")),
    ("planners and checks of one area", (
        "firewall", "kvcr_checks", "kvcr_config", "kvcr_transport", "kvcr_guard", "workers", "dynamo_http",
        "converged")),
    ("planners over the inventory", ("day2", "kv_pools")),
)
BOTTOM = LAYERS[0][0]
RANK = dict((name, rank) for rank, (dummy, names) in enumerate(LAYERS) for name in names)

# Calls that load a module named by a string (the lazy loader that was, importlib, imp, runpy).
LOADERS = {"load", "import_module", "__import__", "load_module", "load_source", "spec_from_file_location",
           "find_spec", "find_loader", "run_module", "run_path"}


def _rel(path):
    return os.path.relpath(path, REPO)


def plugin_files():
    return sorted(glob.glob(os.path.join(PLUGINS, "**", "*.py"), recursive=True))


def module_utils_names():
    return sorted(os.path.splitext(os.path.relpath(p, MODULE_UTILS))[0].replace(os.sep, ".")
                  for p in glob.glob(os.path.join(MODULE_UTILS, "**", "*.py"), recursive=True)
                  if os.path.basename(p) != "__init__.py")


def _package_of(path):
    rel = os.path.relpath(os.path.dirname(path), REPO)
    return [COLLECTION] + ([] if rel == "." else rel.split(os.sep))


def collection_imports(path):
    """[(line, dotted name)] of every import of the collection in the file, relative ones resolved."""
    with open(path, encoding="utf-8") as handle:
        return imports_in(ast.parse(handle.read(), path), _package_of(path))


def imports_in(tree, package):
    """[(line, dotted name)] of the imports of the collection in a parsed file of ``package`` (a list)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1])
                module = base + ("." + node.module if node.module else "")
            else:
                module = node.module or ""
            names = [module + "." + alias.name for alias in node.names]
        else:
            continue
        found.extend((node.lineno, name) for name in names if name.startswith(COLLECTION + "."))
    return found


def module_utils_of(dotted):
    """The module_utils module a dotted import names (None: not module_utils), longest existing match."""
    if not dotted.startswith(MU_PACKAGE + "."):
        return None
    parts = dotted[len(MU_PACKAGE) + 1:].split(".")
    known = set(module_utils_names())
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return parts[0]


def import_graph():
    """{module_utils module: {module_utils modules it imports}}."""
    graph = {}
    for name in module_utils_names():
        path = os.path.join(MODULE_UTILS, *name.split(".")) + ".py"
        graph[name] = set(m for m in (module_utils_of(d) for dummy, d in collection_imports(path)) if m and m != name)
    return graph


def find_cycle(graph):
    """One import cycle as [a, b, ..., a], or None."""
    state = {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt, stack)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node, [])
            if cycle:
                return cycle
    return None


def drawing():
    """The layers drawn in docs/development.md: ({label: set of modules}, {module: set it imports})."""
    with open(DEVELOPMENT_MD, encoding="utf-8") as handle:
        text = handle.read()
    start = text.index("**module_utils layers.**")
    block = re.search(r"```\n(.*?)\n\s*```", text[start:], re.S).group(1)
    layers, edges, label = {}, {}, None
    for line in block.splitlines():
        parts = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        if len(parts) == 2:
            label, content = parts
        else:
            content = parts[0]
        if label not in RANK_OF_LABEL or not content or content == "|":
            continue
        content = re.sub(r"\([^)]*\)", "", content)
        if "->" in content:
            module, targets = content.split("->", 1)
            names = [module]
            edges[module.strip()] = set(t.strip() for t in targets.split(",") if t.strip())
        else:
            names = content.split(",")
        layers.setdefault(label, set()).update(n.strip() for n in names if n.strip())
    return layers, edges


RANK_OF_LABEL = dict((label, rank) for rank, (label, dummy) in enumerate(LAYERS))


def test_every_module_utils_module_has_one_layer():
    listed = [name for dummy, names in LAYERS for name in names]
    assert sorted(set(listed)) == sorted(listed), "a module is in two layers of LAYERS"
    assert sorted(listed) == module_utils_names(), "LAYERS must name every plugins/module_utils module, once"


def test_imports_between_module_utils_run_downward():
    wrong = []
    for module, imported in sorted(import_graph().items()):
        for target in sorted(imported):
            if RANK[module] == 0:
                wrong.append("%s (bottom layer) imports %s: the bottom imports nothing of ours" % (module, target))
            elif target not in RANK or RANK[target] > RANK[module]:
                where = LAYERS[RANK[target]][0] if target in RANK else "in no layer"
                wrong.append("%s (%s) imports %s (%s), a higher layer" % (module, LAYERS[RANK[module]][0], target, where))
    assert wrong == []


def test_module_utils_import_graph_has_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: %s" % " -> ".join(cycle)


def test_module_utils_import_no_plugin():
    """module_utils are what AnsiballZ ships to a managed host: a filter, module, action or lookup
    plugin is not there (and a planner below them must not reach up)."""
    wrong = []
    for name in module_utils_names():
        path = os.path.join(MODULE_UTILS, *name.split(".")) + ".py"
        wrong.extend("%s:%d imports %s" % (_rel(path), line, dotted)
                     for line, dotted in collection_imports(path) if module_utils_of(dotted) is None)
    assert wrong == []


def test_imported_module_utils_exist():
    known = set(module_utils_names())
    wrong = []
    for path in plugin_files():
        for line, dotted in collection_imports(path):
            module = module_utils_of(dotted)
            if module is not None and module not in known:
                wrong.append("%s:%d imports %s: no plugins/module_utils/%s.py" % (_rel(path), line, dotted, module))
    assert wrong == []


def _loads_by_string(node, names):
    func = node.func
    called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if called not in LOADERS:
        return None
    for arg in list(node.args) + [k.value for k in node.keywords]:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            value = arg.value
            if "module_utils" in value or COLLECTION in value or value.split(".")[-1].replace(".py", "") in names \
                    or os.path.splitext(os.path.basename(value))[0] in names:
                return "%s(%r)" % (called, value)
    return None


def test_nothing_loads_module_utils_by_a_string():
    """Plain imports only (docs/development.md): an import-graph tool cannot follow load("x") or
    importlib.import_module("...module_utils.x")."""
    names = set(module_utils_names())
    wrong = []
    for path in plugin_files():
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                call = _loads_by_string(node, names)
                if call:
                    wrong.append("%s:%d %s" % (_rel(path), node.lineno, call))
    assert wrong == []


def test_the_drawing_in_development_md_matches_the_table_and_the_imports():
    layers, edges = drawing()
    assert dict((label, sorted(names)) for label, names in layers.items()) == \
        dict((label, sorted(names)) for label, names in LAYERS), "docs/development.md draws other layers than LAYERS"
    found = dict((module, imported) for module, imported in import_graph().items() if imported)
    assert edges == found, "docs/development.md draws other imports (name -> imports) than the modules have"


@pytest.mark.parametrize("source,called", [
    ('_kvcr = load("kvcr_config")', 'load(\'kvcr_config\')'),
    ('importlib.import_module("ansible_collections.kvshare.dynamo.plugins.module_utils.stack")', "import_module"),
    ('json.load(handle)', None),
    ('importlib.import_module("json")', None),
])
def test_string_loading_is_recognised(source, called):
    node = ast.parse(source).body[-1].value
    found = _loads_by_string(node, set(module_utils_names()))
    assert (found is None) if called is None else (called in found)


def test_relative_and_function_level_imports_are_seen():
    """The graph sees imports inside functions and relative ones (resolved against the file's package)."""
    tree = ast.parse("def f():\n    from . import stack\n    from .ports import parse_port\n"
                     "    import ansible_collections.kvshare.dynamo.plugins.filter.kvcr\n")
    found = [d for dummy, d in imports_in(tree, [COLLECTION, "plugins", "module_utils"])]
    assert [module_utils_of(d) for d in found] == ["stack", "ports", None]
