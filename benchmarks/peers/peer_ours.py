#!/usr/bin/env python
"""Our system in the peer benchmark: `scripts/train.py`'s own code (`vaswani_hf.cli.train.main`) with the phase clock
of `hf_phases` installed first, so that the benchmark learns where the training loop's time goes.

    python benchmarks/peers/peer_ours.py EVENTS.jsonl --recipe multi30k-en-de --key value ...

Everything after EVENTS is scripts/train.py's command line, unchanged.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str]) -> int:
    from hf_phases import install

    from vaswani_hf.data.batching import Seq2SeqCollator
    from vaswani_hf.training.trainer import VaswaniTrainer

    install(argv[0], VaswaniTrainer, Seq2SeqCollator)
    from vaswani_hf.cli.train import main as train_main

    return train_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
