#!/usr/bin/python3
"""Validates scenarios against sluice.schema.json with Debian's python3-jsonschema.

usage: validate.py SCHEMA --valid FILE... --invalid FILE...
Every --valid file must validate; every --invalid file must be rejected. Exit 1 otherwise.
"""
import json
import sys

import jsonschema
import yaml


def main(argv):
    schema = json.load(open(argv[1]))
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    mode, bad = None, 0
    counts = {"--valid": 0, "--invalid": 0}
    for arg in argv[2:]:
        if arg in counts:
            mode = arg
            continue
        doc = yaml.safe_load(open(arg))
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        counts[mode] += 1
        if mode == "--valid" and errors:
            bad += 1
            print(f"FAIL {arg}: rejected: " + "; ".join(f"{'.'.join(map(str, e.absolute_path))}: {e.message[:160]}" for e in errors[:3]))
        elif mode == "--invalid" and not errors:
            bad += 1
            print(f"FAIL {arg}: accepted, but it is malformed")
        else:
            print(f"ok   {arg}" + (f" (rejected: {errors[0].message[:100]})" if errors else ""))
    if counts["--valid"] == 0 or counts["--invalid"] == 0:
        print("need at least one valid and one invalid file")
        return 1
    print(f"{counts['--valid']} valid accepted, {counts['--invalid']} malformed rejected" if not bad else f"{bad} wrong")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
