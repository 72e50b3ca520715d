"""One result row of a bench/feed script: printed as a line, appended as JSON to the --json file."""
import json


def emit(r, out, line):
    """Prints `line`; appends `r` as one JSON object to the file `out` when it is not empty."""
    print(line)
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(r) + "\n")
