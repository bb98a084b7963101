#!/usr/bin/env python3
"""Validates openapi.yaml as OpenAPI 3.1 and refuses duplicate mapping keys (PyYAML would silently keep the last
one; swift-openapi-generator rejects the file)."""
import sys
import yaml
from openapi_spec_validator import validate


class UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


path = sys.argv[1] if len(sys.argv) > 1 else "openapi.yaml"
with open(path) as f:
    spec = yaml.load(f, Loader=UniqueKeyLoader)
validate(spec)
print(f"{path}: valid OpenAPI 3.1, no duplicate keys")
