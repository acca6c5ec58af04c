#!/usr/bin/env python3
"""Each dashboard decoded by Grafana's dashboard model (grafana-foundation-sdk,
generated from Grafana's own schema) and encoded again: every key and value
the file has must come back. A key the model does not know (a misspelt
option, an option of another panel type) is dropped by the decoder, and is
reported here with its path. The check is shown to catch such a key first.

  dashboard_model_check.py DASHBOARD.json...
"""
import copy
import json
import sys

from grafana_foundation_sdk.cog import plugins
from grafana_foundation_sdk.models.dashboard import Dashboard


def lost(original, decoded, path="$"):
    """Paths of `original` that `decoded` lacks or holds differently."""
    if isinstance(original, dict):
        if not isinstance(decoded, dict):
            return [path]
        out = []
        for key, value in original.items():
            sub = f"{path}.{key}"
            out += [sub] if key not in decoded else lost(value, decoded[key], sub)
        return out
    if isinstance(original, list):
        if not isinstance(decoded, list) or len(original) != len(decoded):
            return [path]
        return [p for i, (a, b) in enumerate(zip(original, decoded)) for p in lost(a, b, f"{path}[{i}]")]
    return [] if original == decoded and type(original) is type(decoded) else [path]


def round_trip(dashboard):
    encoded = Dashboard.from_json(dashboard).to_json()
    return json.loads(json.dumps(encoded, default=lambda o: o.to_json()))


def main():
    plugins.register_default_plugins()
    failed = False
    for path in sys.argv[1:]:
        with open(path, encoding="utf-8") as f:
            dashboard = json.load(f)
        if not dashboard.get("panels"):
            print(f"FAIL: {path}: no panels")
            failed = True
            continue
        # The check itself: a misspelt target key must be caught.
        mutated = copy.deepcopy(dashboard)
        mutated["panels"][0]["targets"][0]["legendFormatt"] = "x"
        if "$.panels[0].targets[0].legendFormatt" not in lost(mutated, round_trip(mutated)):
            print(f"FAIL: {path}: the model kept a misspelt key; this check cannot tell")
            failed = True
        missing = lost(dashboard, round_trip(dashboard))
        if missing:
            print(f"FAIL: {path}: Grafana's dashboard model drops or changes " + ", ".join(missing))
            failed = True
        else:
            print(f"ok: {path}: {len(dashboard['panels'])} panels, every key known to Grafana's model")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
