# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""A duplicate scan that reads the roles' and playbooks' YAML as tasks, not as lines.

A Python duplicate finder does not see YAML, and a line scan sees every copied comment but no
block whose task names or role prefixes differ. This one parses each task list (role tasks and
handlers, plays' pre_tasks/tasks/post_tasks/handlers, block/rescue/always bodies) and gives each
task a shape: its module and the names of its keywords (when, register, loop...), with arguments,
values and the task name left out. A block is WINDOW consecutive tasks; two files repeat a block when the same shapes
follow each other in both. A window made only of include/import tasks is a table of contents (a
list of calls, the style every role follows) and is not counted.

    python -m tests.lib.yaml_dupes           # the repeated blocks, and the counts
"""
import collections
import os
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WINDOW = 3
# Task keywords (ansible-core's Task, Block and their bases) that are not the module.
KEYWORDS = frozenset("""
    action any_errors_fatal args async become become_exe become_flags become_method become_user
    changed_when check_mode collections connection debugger delay delegate_facts delegate_to
    diff environment failed_when ignore_errors ignore_unreachable local_action loop loop_control
    module_defaults name no_log notify poll port register remote_user retries run_once tags
    throttle timeout until vars when listen block rescue always
""".split())
INCLUDES = frozenset(name for short in ("include_tasks", "import_tasks", "include_role", "import_role",
                                        "import_playbook", "include_vars")
                     for name in (short, "ansible.builtin." + short))
PLAY_LISTS = ("pre_tasks", "tasks", "post_tasks", "handlers")


def module_of(task):
    """The module key of a task (None for a block or a play entry)."""
    for key in task:
        if key not in KEYWORDS and not key.startswith("with_"):
            return key
    return None


def shape(task):
    """(module, the task's keywords): arguments, values and the name left out, so that a block
    copied with other paths, another role's prefix or one more argument still matches."""
    module = module_of(task)
    keywords = tuple(sorted(key for key in task if key != module and key != "name"))
    return (module, keywords)


def task_lists(data):
    """Every list of tasks in one parsed YAML file, nested blocks included."""
    found = []

    def tasks(items):
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            return
        found.append(items)
        for item in items:
            for key in ("block", "rescue", "always"):
                tasks(item.get(key))

    if isinstance(data, list) and data and all(isinstance(item, dict) for item in data):
        plays = [item for item in data if "hosts" in item or "import_playbook" in item
                 or "ansible.builtin.import_playbook" in item]
        if plays:
            for play in plays:
                for key in PLAY_LISTS:
                    tasks(play.get(key))
        else:
            tasks(data)
    return found


def yaml_files(root=REPO):
    """The task files of the roles and the playbooks, relative to root."""
    paths = []
    for base in ("roles", "playbooks"):
        for top, dirs, files in os.walk(os.path.join(root, base)):
            dirs.sort()
            parts = os.path.relpath(top, root).split(os.sep)
            if base == "roles" and (len(parts) < 3 or parts[2] not in ("tasks", "handlers")):
                continue
            if base == "playbooks" and "vars" in parts:
                continue
            paths.extend(os.path.relpath(os.path.join(top, name), root)
                         for name in sorted(files) if name.endswith((".yml", ".yaml")))
    return paths


def blocks(root=REPO):
    """{window of shapes: [(file, index of its first task, the first task's name)]}."""
    seen = collections.defaultdict(list)
    for path in yaml_files(root):
        with open(os.path.join(root, path)) as handle:
            data = yaml.safe_load(handle)
        for items in task_lists(data):
            shapes = [shape(item) for item in items]
            for start in range(len(items) - WINDOW + 1):
                window = tuple(shapes[start:start + WINDOW])
                if all(module in INCLUDES for module, dummy in window):
                    continue
                seen[window].append((path, start, items[start].get("name", "")))
    return seen


def repeated(root=REPO):
    """{window: its places} for the windows found in more than one file."""
    return dict((window, places) for window, places in blocks(root).items()
                if len(set(path for path, dummy, dummy2 in places)) > 1)


def file_pairs(found):
    """The distinct pairs of files that share at least one repeated window."""
    pairs = set()
    for places in found.values():
        paths = sorted(set(path for path, dummy, dummy2 in places))
        pairs.update((a, b) for i, a in enumerate(paths) for b in paths[i + 1:])
    return pairs


def modules_in_repeats(found):
    """How many repeated windows hold each module."""
    counts = collections.Counter()
    for window in found:
        counts.update(set(module for module, dummy in window))
    return counts


def main(argv=None):
    root = (argv or sys.argv[1:] or [REPO])[0]
    found = repeated(root)
    for window, places in sorted(found.items(), key=lambda item: sorted(item[1])):
        print("%d places: %s" % (len(places), " -> ".join(module or "?" for module, dummy in window)))
        for path, start, name in places:
            print("    %s task %d: %s" % (path, start + 1, name))
    print("repeated blocks of %d tasks: %d, in %d file pairs" % (WINDOW, len(found), len(file_pairs(found))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
