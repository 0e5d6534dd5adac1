"""Every role's meta/argument_specs.yml documents exactly the variables of its defaults/main.yml."""
import os

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES = sorted(d for d in os.listdir(os.path.join(REPO, "roles")) if not d.startswith("."))


def _load(role, *parts):
    path = os.path.join(REPO, "roles", role, *parts)
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        return yaml.safe_load(fh)


@pytest.mark.parametrize("role", ROLES)
def test_role_has_argument_specs_and_defaults(role):
    assert _load(role, "meta", "argument_specs.yml"), "%s has no meta/argument_specs.yml" % role
    assert _load(role, "defaults", "main.yml") is not None, "%s has no defaults/main.yml" % role


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_in_lock_step(role):
    defaults = set((_load(role, "defaults", "main.yml") or {}).keys())
    specs = _load(role, "meta", "argument_specs.yml")["argument_specs"]
    documented = set(specs["main"].get("options", {}).keys())
    assert defaults - documented == set(), "%s: defaults missing from argument_specs" % role
    assert documented - defaults == set(), "%s: argument_specs options without a default" % role
    for entry, spec in specs.items():
        options = spec.get("options", {})
        for name, option in options.items():
            assert name.startswith(role + "_"), "%s: %s is not prefixed with the role name" % (role, name)
            assert option.get("description"), "%s: %s (%s) has no description" % (role, name, entry)
            assert option.get("type"), "%s: %s (%s) has no type" % (role, name, entry)


@pytest.mark.parametrize("role", ROLES)
def test_preflight_entry_point_validates_the_same_options(role):
    specs = _load(role, "meta", "argument_specs.yml")["argument_specs"]
    if os.path.exists(os.path.join(REPO, "roles", role, "tasks", "preflight.yml")):
        assert "preflight" in specs, "%s: tasks/preflight.yml has no argument_specs entry point" % role
        assert specs["preflight"]["options"].keys() == specs["main"]["options"].keys()


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
    defaults = _load(role, "defaults", "main.yml") or {}
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
