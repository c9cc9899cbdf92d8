"""Words/s of a fairseq-cpp-train run from its JSON log (common.log_format=json, log_interval=1).

Reads the log on stdin and prints one line: words/s over updates 6.. (the first five warm up),
the last update's loss, and every update's target tokens (wpb), space-separated, so that runs can
be checked to have trained on the same batches.
    grep -o '\\[train_inner\\] {.*}' LOG | python3 tools/bench/words_per_second.py
"""
import json
import sys

rows = [json.loads(line[line.index("{"):]) for line in sys.stdin if "{" in line]
if len(rows) < 6:
    sys.exit(f"words_per_second.py: {len(rows)} train_inner lines; at least 6 are needed")
tokens = " ".join(str(round(r["wpb"])) for r in rows)
last = rows[-1]["loss"]
rows = rows[5:]
print(round(sum(r["wpb"] for r in rows) / sum(r["wpb"] / r["wps"] for r in rows)), last, tokens)
