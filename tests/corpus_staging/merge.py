"""Merge audited staged cases of one part into tests/corpus (skips drops, unaudited cases and existing names).

    python tests/corpus_staging/merge.py PART tests/corpus_staging/PART/audit.json
"""
import json, shutil, sys
from pathlib import Path
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from corpus_cases import REQUIRED, CAUSES, FRAMEWORKS, fold_of
part, audit = sys.argv[1], json.load(open(sys.argv[2]))
src = HERE / part
dst = HERE.parent / "corpus"
for d in sorted(p for p in src.iterdir() if p.is_dir()):
    a = audit.get(d.name)
    if a is None:
        print("UNAUDITED", d.name); continue
    if a["result"] == "drop":
        print("DROP", d.name); continue
    if (dst / d.name).exists():
        print("EXISTS", d.name); continue
    meta = json.loads((d / "case.json").read_text())
    missing = [k for k in REQUIRED if k not in meta]
    assert not missing, (d.name, missing)
    assert meta["label"] in CAUSES and meta["framework"] in FRAMEWORKS, d.name
    for f in meta["files"]:
        assert (d / f).is_file(), (d.name, f)
    shutil.copytree(d, dst / d.name)
    print("MERGED", d.name, meta["label"], fold_of(meta["url"]), a["result"])
