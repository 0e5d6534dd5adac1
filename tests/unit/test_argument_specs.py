# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Every role's meta/argument_specs.yml documents exactly the public variables of its
defaults/main.yml (names, values and types), and the roles together have at most
MAX_PUBLIC_VARIABLES of them. Private defaults (``__<role>_*``) are not options and are left out."""
import os

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES = sorted(d for d in os.listdir(os.path.join(REPO, "roles")) if not d.startswith("."))
# Issue 17 ("One stack contract"): what an operator can set stays small. A new public variable
# needs a reason; an internal path, a derived value or another role's setting is private
# (``__<role>_*``) or read where it is defined. 201: kvcr_service_nice (kvcr 0.1.1's Guard polls
# every millisecond while a worker holds its pool, about half a core per memory service). 202:
# kvcr_service_timer_slack_ms (the same poll: fewer wake-ups where its latency can wait).
MAX_PUBLIC_VARIABLES = 202
# Inventory inputs a role documents (and its argument spec checks) under the name the inventory
# writes, with no default of the role: several roles read them, so none of them owns the name.
INVENTORY_INPUTS = {"dynamo_worker": {"dynamo_workers"}}


def _load(role, *parts):
    path = os.path.join(REPO, "roles", role, *parts)
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        return yaml.safe_load(fh)


def _public(mapping):
    return {name: value for name, value in (mapping or {}).items() if not name.startswith("__")}


def _private_prefix_ok(role, name):
    return name.startswith("__%s_" % role)


@pytest.mark.parametrize("role", ROLES)
def test_role_has_argument_specs_and_defaults(role):
    assert _load(role, "meta", "argument_specs.yml"), "%s has no meta/argument_specs.yml" % role
    assert _load(role, "defaults", "main.yml") is not None, "%s has no defaults/main.yml" % role


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_in_lock_step(role):
    defaults = set(_public(_load(role, "defaults", "main.yml")).keys())
    inputs = INVENTORY_INPUTS.get(role, set())
    specs = _load(role, "meta", "argument_specs.yml")["argument_specs"]
    documented = set(specs["main"].get("options", {}).keys())
    assert defaults - documented == set(), "%s: defaults missing from argument_specs" % role
    assert documented - defaults - inputs == set(), "%s: argument_specs options without a default" % role
    assert inputs <= documented, "%s: inventory inputs missing from argument_specs" % role
    assert defaults & inputs == set(), "%s: an inventory input has a role default" % role
    for entry, spec in specs.items():
        options = spec.get("options", {})
        for name, option in options.items():
            assert name.startswith(role + "_") or name in inputs, "%s: %s is not prefixed with the role name" % (role, name)
            assert option.get("description"), "%s: %s (%s) has no description" % (role, name, entry)
            assert option.get("type"), "%s: %s (%s) has no type" % (role, name, entry)


@pytest.mark.parametrize("role", ROLES)
def test_preflight_entry_point_validates_the_same_options(role):
    specs = _load(role, "meta", "argument_specs.yml")["argument_specs"]
    if os.path.exists(os.path.join(REPO, "roles", role, "tasks", "preflight.yml")):
        assert "preflight" in specs, "%s: tasks/preflight.yml has no argument_specs entry point" % role
        assert specs["preflight"]["options"] == specs["main"]["options"], \
            "%s: the preflight entry point documents other options (or values) than main" % role


def _contract():
    return _load("kvshare", "defaults", "main.yml")["kvshare_service_defaults"]


def _is_template(value):
    return isinstance(value, str) and "{{" in value


@pytest.mark.parametrize("role", ROLES)
def test_default_values_match_argument_specs(role):
    """The value in defaults/main.yml is the argument spec's default. A default that reads the stack
    contract (roles/kvshare) is compared with the contract's value; a computed (Jinja) default is
    either repeated verbatim in the spec or left out there (computed, described in words); a
    default of null means the option has none."""
    defaults = _public(_load(role, "defaults", "main.yml"))
    options = _load(role, "meta", "argument_specs.yml")["argument_specs"]["main"].get("options", {})
    contract = _contract()
    wrong = []
    for name, value in defaults.items():
        option = options.get(name, {})
        has_default = "default" in option
        spec = option.get("default")
        reference = "{{ kvshare_service_defaults.%s }}" % name
        if value == reference:
            ok = has_default and name in contract and spec == contract[name]
        elif _is_template(value):
            ok = not has_default or spec == value
        elif value is None:
            ok = not has_default or spec is None
        else:
            ok = has_default and spec == value and type(spec) is type(value)
        if not ok:
            wrong.append("%s: defaults/main.yml %r, argument_specs %s" % (name, value, repr(spec) if has_default else "(no default)"))
    assert wrong == [], "%s: default values differ:\n  %s" % (role, "\n  ".join(wrong))


@pytest.mark.parametrize("role", ROLES)
def test_private_defaults_carry_the_role_prefix(role):
    """A private default is ``__<role>_*``: never an option, never another role's name."""
    defaults = _load(role, "defaults", "main.yml") or {}
    wrong = sorted(n for n in defaults if n.startswith("_") and not _private_prefix_ok(role, n))
    assert wrong == [], "%s: private defaults without the __%s_ prefix: %s" % (role, role, wrong)


# The Python type of a literal default for each argument_specs type (path, str and raw take strings).
_TYPES = {"str": (str,), "path": (str,), "bool": (bool,), "int": (int,), "float": (float, int),
          "list": (list,), "dict": (dict,)}


@pytest.mark.parametrize("role", ROLES)
def test_literal_defaults_have_the_documented_type_and_choice(role):
    """A literal (non-Jinja, non-null) default is of the option's type, its list elements of
    ``elements``, and one of ``choices`` where the option has them."""
    defaults = _public(_load(role, "defaults", "main.yml"))
    options = _load(role, "meta", "argument_specs.yml")["argument_specs"]["main"].get("options", {})
    wrong = []
    for name, value in defaults.items():
        option = options.get(name, {})
        if value is None or _is_template(value) or option.get("type") not in _TYPES:
            continue
        types = _TYPES[option["type"]]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            wrong.append("%s: %r is not of type %s" % (name, value, option["type"]))
            continue
        element = _TYPES.get(option.get("elements"))
        if isinstance(value, list) and element and not all(isinstance(v, element) for v in value):
            wrong.append("%s: %r has elements that are not %s" % (name, value, option["elements"]))
        if "choices" in option and not isinstance(value, list) and value not in option["choices"]:
            wrong.append("%s: %r is not one of %r" % (name, value, option["choices"]))
    assert wrong == [], "%s: defaults that do not match their argument spec:\n  %s" % (role, "\n  ".join(wrong))


def _public_variables():
    return {role: sorted(_public(_load(role, "defaults", "main.yml"))) for role in ROLES}


def test_public_variable_count_stays_small():
    """Every public variable of every role, counted: at most MAX_PUBLIC_VARIABLES."""
    counts = {role: len(names) for role, names in _public_variables().items()}
    total = sum(counts.values())
    assert total <= MAX_PUBLIC_VARIABLES, "%d public role variables (at most %d): %s" % (
        total, MAX_PUBLIC_VARIABLES, ", ".join("%s %d" % item for item in sorted(counts.items())))
