# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Many ansible-playbook runs from one warm controller process (the bad-input suite's runner).

``run_playbooks(jobs, env)`` starts this file as a server (``python prefork.py``, in ``env``: the
ANSIBLE_* settings must be there, ansible-core reads its configuration once, at import). The server
imports ansible-core, the collection's plugins and module_utils and the enabled callbacks once, then
forks one child per job. The child is the ``ansible-playbook`` run: ``ansible.cli.playbook.main()``
with the job's argv (what the ``ansible-playbook`` script calls), its stdout and stderr to the job's
files, its exit status the job's; the atexit handlers the run registers run at its end, the
server's do not. The playbook, the inventory, the strategy and its forked worker processes are
ansible-core's, unchanged: what changes is what each process finds already done.

- Start-up: the interpreter, the imports, plugin and module_utils loading (the collection loader
  compiles module_utils from source at each import) are paid once, by the server, instead of once
  per run and again in each worker process the run forks per host and task.
- Compiled templates: ansible-core compiles every Jinja template and conditional each time it
  evaluates one, in each worker, and Jinja's own cache covers only named template files. Jinja's
  compile step (source to Python code object) depends on the source and the environment's syntax
  settings only, so the server keeps the code objects: a run that compiles something the server does
  not have yet notes it (KVSHARE_PREFORK_TEMPLATES_MISSED, a file), the server compiles it before the
  next fork, and every later run and worker gets the code object instead of compiling again. It is
  on for the ansible-core and Jinja series it was written against (``TEMPLATE_CACHE_FOR``), off
  elsewhere or with KVSHARE_PREFORK_TEMPLATE_CACHE=0.
- Forks: the server's objects are frozen (``gc.freeze()``), so its children's collections never walk
  them and the pages holding them stay shared; each run freezes its heap before it forks a worker
  (``os.register_at_fork``), for the same reason.

Jobs run ``parallel`` at a time, each limited to ``timeout`` seconds (SIGALRM ends a run that hangs).
"""
import atexit
import contextlib
import gc
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTION_PLUGINS = os.path.join(REPO, "plugins")
# Python plugin kinds of the collection a validation run loads, and its module_utils.
COLLECTION_KINDS = ("module_utils", "plugin_utils", "filter", "test", "action", "lookup", "cache", "callback")
# Callbacks of other collections that the configuration enables (ansible.cfg, the suite's env).
CALLBACKS = ("ansible.posix.json", "ansible.posix.profile_tasks")
# (ansible-core, Jinja) release series whose compile paths the template cache reproduces.
TEMPLATE_CACHE_FOR = (("2.19.",), ("3.1.",))
MISSED_ENV = "KVSHARE_PREFORK_TEMPLATES_MISSED"
SWITCH_ENV = "KVSHARE_PREFORK_TEMPLATE_CACHE"


def run_playbooks(jobs, env, parallel=1, timeout=300):
    """Run ``jobs`` ({"id", "argv", "stdout", "stderr"}; argv as ansible-playbook's, cwd REPO) in one
    server. Returns {id: {"rc", "cpu", "wall"}} (cpu: user + system seconds of the run and its
    workers) and, under the key None, the server's own figures (start-up seconds, template cache)."""
    for job in jobs:
        # The server configured the collection loader for every run, from the configuration alone.
        assert not any(str(a).startswith("--collections-path") for a in job["argv"]), job
    with tempfile.NamedTemporaryFile(prefix="kvshare-prefork-templates-", suffix=".jsonl") as missed:
        request = json.dumps({"jobs": jobs, "parallel": parallel, "timeout": timeout})
        proc = subprocess.run([sys.executable, os.path.abspath(__file__)], input=request, cwd=REPO,
                              env=dict(env, **{MISSED_ENV: missed.name}), capture_output=True, text=True, check=False)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            item = json.loads(line)
            results[item.pop("id")] = item
    if proc.returncode != 0 or None not in results or len(results) != len(jobs) + 1:
        raise RuntimeError("prefork server: rc=%s, %d of %d jobs reported: %s"
                           % (proc.returncode, len(results) - (None in results), len(jobs), proc.stderr[-3000:]))
    return results


# -- the server's start-up ---------------------------------------------------------------------------

def _warm_up():
    """Import what every run imports, once: ansible-core's CLI, executor and plugins, the collection's
    plugins and module_utils (through the collection loader, as the runs resolve them)."""
    from ansible.cli import playbook  # noqa: F401  pylint: disable=unused-import
    from ansible.plugins import loader
    # What CLI.run() does first (the same configured paths); a run's own call is then a no-op.
    loader.init_plugin_loader([])
    for name in ("ansible.executor.playbook_executor", "ansible.executor.task_queue_manager",
                 "ansible.executor.task_executor", "ansible.executor.process.worker",
                 "ansible.plugins.strategy.linear", "ansible.plugins.connection.local", "ansible.plugins.shell.sh",
                 "ansible.plugins.inventory.yaml", "ansible.plugins.vars.host_group_vars"):
        importlib.import_module(name)
    for plugins in (loader.action_loader, loader.lookup_loader, loader.cache_loader, loader.become_loader):
        for dummy in plugins.all(class_only=True):
            pass
    for plugins in (loader.filter_loader, loader.test_loader):
        for dummy in plugins.all():
            pass
    for kind in COLLECTION_KINDS:
        path = os.path.join(COLLECTION_PLUGINS, kind)
        for name in sorted(os.listdir(path)) if os.path.isdir(path) else []:
            if name.endswith(".py") and name != "__init__.py":
                importlib.import_module("ansible_collections.kvshare.dynamo.plugins.%s.%s" % (kind, name[:-3]))
    for fqcn in CALLBACKS:
        namespace, collection, name = fqcn.split(".")
        importlib.import_module("ansible_collections.%s.%s.plugins.callback.%s" % (namespace, collection, name))


# -- compiled templates, shared by the runs ----------------------------------------------------------

class TemplateCode:
    """Jinja code objects by (kind, source, compile arguments, environment syntax settings)."""

    # The Environment settings that shape what Jinja compiles a source to.
    SETTINGS = ("block_start_string", "block_end_string", "variable_start_string", "variable_end_string",
                "comment_start_string", "comment_end_string", "line_statement_prefix", "line_comment_prefix",
                "trim_blocks", "lstrip_blocks", "newline_sequence", "keep_trailing_newline", "optimized",
                "autoescape", "is_async")

    def __init__(self, missed_path):
        self.code = {}
        self.missed_path = missed_path
        self.offset = 0
        self.noting = True
        self.jinja = None

    @staticmethod
    def enabled():
        import jinja2
        from ansible.release import __version__
        return (os.environ.get(SWITCH_ENV, "1") != "0"
                and __version__.startswith(TEMPLATE_CACHE_FOR[0]) and jinja2.__version__.startswith(TEMPLATE_CACHE_FOR[1]))

    def _settings(self, env):
        tcc = self.jinja["compile_context"].current(optional=True)
        return [type(env).__module__, type(env).__qualname__, env.code_generator_class.__qualname__,
                sorted(env.extensions), getattr(env.finalize, "__qualname__", repr(env.finalize)),
                None if tcc is None else bool(tcc.escape_backslashes),
                [repr(getattr(env, name)) for name in self.SETTINGS]]

    def _note(self, key):
        """A run compiled ``key`` itself: tell the server (one line, appended: runs and workers write at once)."""
        if self.noting and self.missed_path:
            fd = os.open(self.missed_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, (key + "\n").encode("utf-8", "surrogatepass"))
            finally:
                os.close(fd)

    def install(self):
        """Wrap Jinja's compile of a template source and ansible-core's compile of an expression."""
        from jinja2 import nodes
        from jinja2.environment import Environment, TemplateExpression
        from jinja2.exceptions import TemplateSyntaxError
        from jinja2.parser import Parser
        from ansible._internal._templating import _jinja_bits  # pylint: disable=import-error,no-name-in-module

        self.jinja = {"compile_context": _jinja_bits._TemplateCompileContext}  # pylint: disable=protected-access
        compile_source = Environment.compile
        compile_expression = _jinja_bits.AnsibleEnvironment.compile_expression
        cache = self

        def cached_compile(env, source, name=None, filename=None, raw=False, defer_init=False):
            if raw or not isinstance(source, str) or env._debuggable_template_source:  # pylint: disable=protected-access
                return compile_source(env, source, name, filename, raw, defer_init)
            key = json.dumps(["template", str(source), name, filename, bool(defer_init), cache._settings(env)])
            code = cache.code.get(key)
            if code is None:
                code = cache.code[key] = compile_source(env, source, name, filename, raw, defer_init)
                cache._note(key)
            return code

        def cached_compile_expression(env, source, undefined_to_none=True):
            if not isinstance(source, str) or env._debuggable_template_source:  # pylint: disable=protected-access
                return compile_expression(env, source, undefined_to_none)
            key = json.dumps(["expression", str(source), bool(undefined_to_none), cache._settings(env)])
            code = cache.code.get(key)
            if code is None:
                # jinja2.Environment.compile_expression, keeping the code object it compiles
                parser = Parser(env, source, state="variable")
                try:
                    expr = parser.parse_expression()
                    if not parser.stream.eos:
                        raise TemplateSyntaxError("chunk after expression", parser.stream.current.lineno, None, None)
                    expr.set_environment(env)
                except TemplateSyntaxError:
                    return compile_expression(env, source, undefined_to_none)  # raises as it always does
                body = [nodes.Assign(nodes.Name("result", "store"), expr, lineno=1)]
                code = cache.code[key] = compile_source(env, nodes.Template(body, lineno=1))
                cache._note(key)
            return TemplateExpression(env.template_class.from_code(env, code, env.make_globals(None), None), undefined_to_none)

        Environment.compile = cached_compile
        _jinja_bits.AnsibleEnvironment.compile_expression = cached_compile_expression

    def learn(self):
        """In the server: compile what the runs so far compiled themselves. Returns how many."""
        if not self.missed_path or not os.path.exists(self.missed_path):
            return 0
        from ansible._internal._templating._engine import TemplateEngine  # pylint: disable=import-error,no-name-in-module

        with open(self.missed_path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        data = data[:data.rfind(b"\n") + 1]  # whole lines only
        self.offset += len(data)
        env = TemplateEngine().environment
        learned = 0
        self.noting = False
        try:
            for key in data.decode("utf-8", "surrogatepass").splitlines():
                if key in self.code:
                    continue
                entry = json.loads(key)
                escape = entry[-1][5]
                context = contextlib.nullcontext() if escape is None else self.jinja["compile_context"](escape_backslashes=escape)
                try:
                    with context:
                        if json.dumps(self._settings(env)) != json.dumps(entry[-1]):
                            continue  # another environment (a template's own overrides): left to the runs
                        if entry[0] == "template":
                            env.compile(entry[1], entry[2], entry[3], defer_init=entry[4])
                        else:
                            env.compile_expression(entry[1], entry[2])
                except Exception:  # pylint: disable=broad-except  # the runs compile it (and fail) themselves
                    continue
                learned += key in self.code
        finally:
            self.noting = True
        return learned


# -- the runs ------------------------------------------------------------------------------------------

def _run_child(job, timeout):
    """In the forked child: one ansible-playbook run. Never returns."""
    code = 255
    try:
        for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
            out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, fd)
            os.close(out)
        signal.alarm(timeout)
        atexit._clear()  # pylint: disable=protected-access  # the server's handlers stay the server's
        os.register_at_fork(before=gc.freeze)
        # The server configured the collection loader already (the same paths the run's CLI.run() uses).
        warnings.filterwarnings("ignore", "AnsibleCollectionFinder has already been configured")
        from ansible.cli import playbook
        sys.argv = list(job["argv"])
        playbook.main()  # what the ansible-playbook script runs; it exits through SystemExit
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # pylint: disable=broad-except
        import traceback
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()  # pylint: disable=protected-access  # the run's own, as at a process's exit
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)  # pylint: disable=protected-access


def serve(request):
    """Run every job, ``parallel`` at a time; print one JSON line per finished job."""
    started = time.time()
    _warm_up()
    templates = TemplateCode(os.environ.get(MISSED_ENV))
    if templates.enabled():
        templates.install()
    else:
        templates = None
    gc.collect()
    gc.freeze()
    pending = list(request["jobs"])
    running = {}
    print(json.dumps({"id": None, "warm_up": round(time.time() - started, 3), "template_cache": bool(templates)}), flush=True)
    while pending or running:
        while pending and len(running) < max(1, int(request.get("parallel") or 1)):
            if templates and templates.learn():
                gc.freeze()
            job = pending.pop(0)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _run_child(job, int(request.get("timeout") or 300))
            running[pid] = (job, time.time())
        pid, status, usage = os.wait4(-1, 0)
        if pid not in running:
            continue
        job, t0 = running.pop(pid)
        print(json.dumps({"id": job["id"], "rc": os.waitstatus_to_exitcode(status),
                          "cpu": round(usage.ru_utime + usage.ru_stime, 3), "wall": round(time.time() - t0, 3)}), flush=True)


if __name__ == "__main__":
    os.chdir(REPO)
    serve(json.load(sys.stdin))
