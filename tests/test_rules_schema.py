"""docs/rules.schema.json and docs/rules.md agree with the loader (memo_mw/rules.py).

The schema is for editors (YAML language servers); the loader is the authority. These tests
fail when a key is added to or removed from the loader without updating the schema and the
reference, so the three cannot drift apart.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from memo_mw import defaults
from memo_mw.rules import FORGET_SCOPES, GATE_KEYS, GATE_SCOPES, MEMORY_TYPES, TOP_KEYS, TRIGGER_KEYS, default_rule_paths

DOCS = Path(__file__).resolve().parent.parent / "docs"
SCHEMA_PATH = DOCS / "rules.schema.json"
REFERENCE_PATH = DOCS / "rules.md"

#: The keys of a rule's ``examples`` mapping (memo_mw.rules._examples).
EXAMPLE_KEYS = {"match", "no_match"}


@pytest.fixture(scope="module")
def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def test_schema_is_json_of_draft_2020_12(schema):
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["type"] == "object"


def test_top_level_keys_match_the_loader(schema):
    assert set(schema["properties"]) == TOP_KEYS
    assert schema["additionalProperties"] is False  # the loader reports unknown sections


def test_trigger_keys_match_the_loader(schema):
    trigger = schema["$defs"]["trigger"]
    assert set(trigger["properties"]) == TRIGGER_KEYS
    assert trigger["additionalProperties"] is False
    # The loader refuses a trigger without these (key defaults to '{what}', polarity to 1).
    assert set(trigger["required"]) == {"id", "pattern", "type", "summary"}


@pytest.mark.parametrize("name", ["gate", "forgetGate"])
def test_gate_keys_match_the_loader(schema, name):
    gate = schema["$defs"][name]
    # `others` is a key of negative rules only (the loader reports it elsewhere)
    assert set(gate["properties"]) == (GATE_KEYS if name == "gate" else GATE_KEYS - {"others"})
    assert gate["additionalProperties"] is False
    assert set(gate["required"]) == {"id", "pattern"}


def test_sections_use_the_right_definitions(schema):
    props = schema["properties"]
    assert props["triggers"]["items"] == {"$ref": "#/$defs/trigger"}
    assert props["forget"]["items"] == {"$ref": "#/$defs/forgetGate"}
    for section in ("negative", "sensitive"):
        assert props[section]["items"] == {"$ref": "#/$defs/gate"}, section
    assert props["recall_all"]["items"] == {"$ref": "#/$defs/recallAllGate"}
    assert "scope" not in schema["$defs"]["recallAllGate"]["properties"]  # the loader rejects it there


def test_examples_keys_match_the_loader(schema):
    examples = schema["$defs"]["examples"]
    assert set(examples["properties"]) == EXAMPLE_KEYS
    assert examples["additionalProperties"] is False


def test_enums_match_the_loader(schema):
    trigger = schema["$defs"]["trigger"]["properties"]
    assert trigger["type"]["enum"] == list(MEMORY_TYPES)
    assert sorted(trigger["polarity"]["enum"]) == [-1, 1]
    assert schema["$defs"]["forgetGate"]["properties"]["scope"]["enum"] == list(FORGET_SCOPES)
    assert schema["$defs"]["gate"]["properties"]["scope"]["enum"] == list(GATE_SCOPES)


def test_defaults_match_the_loader(schema):
    props = schema["properties"]
    assert props["max_length"]["default"] == defaults.MAX_MESSAGE_CHARS
    assert props["max_capture"]["default"] == defaults.MAX_CAPTURE_CHARS
    trigger = schema["$defs"]["trigger"]["properties"]
    assert trigger["confidence"]["default"] == defaults.DEFAULT_CONFIDENCE
    assert trigger["polarity"]["default"] == 1
    assert trigger["key"]["default"] == "{what}"
    assert schema["$defs"]["forgetGate"]["properties"]["scope"]["default"] == "all"
    assert schema["$defs"]["gate"]["properties"]["scope"]["default"] == "sentence"


def test_every_key_has_a_description(schema):
    missing = [f"top-level {k}" for k, v in schema["properties"].items() if not v.get("description")]
    for name in ("trigger", "gate", "forgetGate", "examples"):
        for key, value in schema["$defs"][name]["properties"].items():
            # A property that is only a $ref takes the description of the definition it points to.
            target = value
            if "$ref" in value and not value.get("description"):
                target = schema["$defs"][value["$ref"].rsplit("/", 1)[-1]]
            if not target.get("description"):
                missing.append(f"{name}.{key}")
    assert not missing


def test_shipped_rules_validate_against_the_schema(schema):
    jsonschema = pytest.importorskip(
        "jsonschema", reason="jsonschema is not installed (optional): the shipped rules are not checked "
                             "against docs/rules.schema.json")
    validator_class = jsonschema.Draft202012Validator
    validator_class.check_schema(schema)
    validator = validator_class(schema)
    for path in default_rule_paths():
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
        errors = [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
                  for e in validator.iter_errors(data)]
        assert not errors, f"{path}:\n" + "\n".join(errors)
    # And the schema does reject what the loader rejects.
    bad = {"triggers": [{"id": "x", "pattern": "I like (?P<what>.+)", "type": "preferences",
                         "summary": "likes {what}", "ttl": 3}],
           "trigers": []}
    messages = " | ".join(e.message for e in validator.iter_errors(bad))
    assert "'trigers' was unexpected" in messages
    assert "'ttl' was unexpected" in messages
    assert "'preferences' is not one of" in messages


def test_reference_mentions_every_accepted_key():
    text = REFERENCE_PATH.read_text(encoding="utf-8")
    keys = TOP_KEYS | TRIGGER_KEYS | GATE_KEYS | EXAMPLE_KEYS
    # Written as code (`key`), so a word of prose ("the key", "a type") does not count.
    missing = sorted(k for k in keys if not re.search(rf"`{re.escape(k)}(?:[`:])", text))
    assert not missing, f"docs/rules.md does not mention: {', '.join(missing)}"


def test_reference_mentions_every_memory_type_and_stage():
    from memo_mw.funnel import STAGES

    text = REFERENCE_PATH.read_text(encoding="utf-8")
    missing = sorted(w for w in (*MEMORY_TYPES, *FORGET_SCOPES, *STAGES) if f"`{w}`" not in text)
    assert not missing, f"docs/rules.md does not mention: {', '.join(missing)}"


def test_the_grammar_tables_examples_do_what_the_reference_says():
    """docs/rules.md, "What the shipped grammar reads": every quoted example of the table is
    captured by the shipped rules, and every one of the paragraph after it is not."""
    from memo_mw.funnel import Funnel
    from memo_mw.rules import load_rules

    text = REFERENCE_PATH.read_text(encoding="utf-8")
    section = text[text.index("### What the shipped grammar reads"):text.index("## How triggers are tried")]
    table, left_alone = section.split("What they leave alone")
    funnel = Funnel(load_rules())
    read, left = re.findall(r'"([^"]+)"', table), re.findall(r'"([^"]+)"', left_alone)
    assert len(read) > 30 and len(left) > 8
    assert [s for s in read if not funnel.process(s).candidates] == []
    assert [s for s in left if funnel.process(s).candidates] == []
