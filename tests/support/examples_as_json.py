#!/usr/bin/env python3
"""Prints every file under examples/ as JSON, {path: [documents]}, for tests/examples.rs.

YAML through PyYAML, with CloudFormation's short tags (!Ref, !Sub, ...) read as
{"Ref": ...} / {"Fn::Sub": ...}; JSON as it is. Exits 2 on a file that does not parse.
"""
import json
import os
import sys

import yaml


class Loader(yaml.SafeLoader):
    pass


def _tag(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {"Ref" if suffix == "Ref" else "Fn::" + suffix: value}


Loader.add_multi_constructor("!", _tag)

root = sys.argv[1]
out = {}
for folder, _, files in os.walk(root):
    for name in sorted(files):
        path = os.path.join(folder, name)
        rel = os.path.relpath(path, root)
        try:
            with open(path) as f:
                if name.endswith((".yaml", ".yml")):
                    out[rel] = list(yaml.load_all(f, Loader=Loader))
                elif name.endswith(".json"):
                    out[rel] = [json.load(f)]
        except Exception as e:  # noqa: BLE001 - any parse failure fails the test
            print(f"{rel}: {e}", file=sys.stderr)
            sys.exit(2)
print(json.dumps(out))
