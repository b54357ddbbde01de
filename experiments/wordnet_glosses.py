"""A text-features public proxy at MNIST's size (issue 29): WordNet 3.0's noun glosses, each labelled
with its lexicographer file (26 classes: noun.artifact, noun.person, noun.plant, …), embedded by the
packaged MiniLM-L6.

82,115 noun synsets: a fixed public permutation (seed 0) puts the first 60,000 in the training split
and the other 22,115 in the test split. The text is the gloss alone (definition and examples, no head
words), so a head has to read the definition. Offline source: Debian's `wordnet-base`
(`/usr/share/wordnet/data.noun`, Princeton's WordNet licence); `--wordnet` names another copy.
Embedding takes about 10 minutes on 2 cores; the result is cached (`--cache`).

    apt-get install wordnet-base
    .venv/bin/python experiments/wordnet_glosses.py --cache /tmp/wordnet_minilm.npz
    .venv/bin/python experiments/selection_planner.py --dataset wordnet_minilm \
        --sizes 500,1000,5000,60000 --noise planned_each --eps 0.1,0.25,0.5,1,2,4,8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from dphpo.train.linear_head import PreparedFeatures  # noqa: E402

DEFAULT_WORDNET = Path("/usr/share/wordnet/data.noun")
DEFAULT_CACHE = Path("/tmp/wordnet_minilm.npz")
N_TRAIN = 60_000
#: WordNet's lexicographer files 03-28 (lexnames(5WN)): the noun classes, in file-number order.
NOUN_FILES = ("Tops act animal artifact attribute body cognition communication event feeling food group location "
              "motive object person phenomenon plant possession process quantity relation shape state substance time").split()


def read_glosses(path: Path) -> tuple[list[str], np.ndarray]:
    """(gloss, class) of every noun synset of a WordNet data.noun file, in file order."""
    texts, labels = [], []
    with path.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if line.startswith("  "):  # the licence header
                continue
            head, _, gloss = line.partition(" | ")
            labels.append(int(head.split()[1]) - 3)
            texts.append(gloss.strip())
    y = np.asarray(labels, dtype=np.int64)
    if not texts or y.min() < 0 or y.max() >= len(NOUN_FILES):
        raise ValueError(f"{path}: not a WordNet data.noun file (lexicographer files outside 03-28)")
    return texts, y


def build_cache(wordnet: Path, cache: Path) -> None:
    from dphpo.features.extractors import MiniLMExtractor

    texts, y = read_glosses(wordnet)
    x = MiniLMExtractor("minilm_l6").extract(texts, progress=True)
    tmp = cache.with_name(cache.name + ".tmp.npz")
    np.savez(tmp, x=x, y=y)
    tmp.replace(cache)


def wordnet_features(cache: Path = DEFAULT_CACHE) -> PreparedFeatures:
    """The cached embeddings as PreparedFeatures: 60,000 training and 22,115 test glosses (public split)."""
    if not cache.exists():
        raise SystemExit(f"{cache}: no WordNet embeddings; run experiments/wordnet_glosses.py --cache {cache} first")
    data = np.load(cache)
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    train, test = order[:N_TRAIN], order[N_TRAIN:]
    return PreparedFeatures(x[train], y[train], x[test], y[test], len(NOUN_FILES), f"wordnet-noun-minilm:{cache.name}",
                            {}, n_public=N_TRAIN)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wordnet", type=Path, default=DEFAULT_WORDNET, help="WordNet 3.0's data.noun")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where to write the embeddings (.npz)")
    args = p.parse_args()
    if not args.wordnet.exists():
        raise SystemExit(f"{args.wordnet}: not found; install Debian's wordnet-base or pass --wordnet")
    build_cache(args.wordnet, args.cache)
    counts = np.bincount(np.load(args.cache)["y"], minlength=len(NOUN_FILES))
    print(f"{args.cache}: {counts.sum()} glosses, {len(NOUN_FILES)} classes (largest noun.{NOUN_FILES[counts.argmax()]}: "
          f"{counts.max() / counts.sum():.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
