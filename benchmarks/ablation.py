"""ablation: what each DQN-family component adds: plain DQN, each component alone, and all together.

Variants, all from one preset at equal steps (our DQN always uses double-DQN targets):
plain; dueling (`--dueling`); n-step (`--n-step 3`); prioritized (`--prioritized`); all three;
and QR-DQN (the `qrdqn` agent with the preset's settings, 50 quantiles).
Each variant runs with the seeds given (0, 1, 2 by default) as an ordinary training run, two at a
time with one torch thread each. A finished run's summary and evaluation curve go to
`benchmarks/results/ablation/<preset>/<variant>-s<seed>.json`, and a run already there is never
repeated, so the ablation can be completed over several sittings. Afterwards (or with --report
alone) it writes a table to `docs/ablation.md` and the curves to `docs/images/ablation-<preset>.png`.

    python benchmarks/ablation.py [--preset dqn-lunarlander] [--seeds 0 1 2] [--jobs 2] [--report]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from _runs import RESULTS, ROOT, last_quarter_mean, load, merged, plot_curves, run_missing, spread

VARIANTS: dict[str, dict] = {
    # name: changes to the preset (agent, strategy, hyperparameters)
    "plain": {},
    "dueling": {"hyperparameters": {"dueling": True}},
    "n-step 3": {"strategy": {"n_step": 3}},
    "prioritized": {"strategy": {"prioritized": True}},
    "all": {"strategy": {"n_step": 3, "prioritized": True}, "hyperparameters": {"dueling": True}},
    "qr-dqn": {"agent": "qrdqn"},
}


def result_path(preset_name: str, variant: str, seed: int) -> Path:
    return RESULTS / "ablation" / preset_name / f"{variant.replace(' ', '-')}-s{seed}.json"


def runs(preset_name: str, seeds: list[int]) -> list[tuple[Path, dict, dict]]:
    return [(result_path(preset_name, variant, seed), dict(merged(preset_name, changes), seed=seed),
             {"preset": preset_name, "variant": variant})
            for seed in seeds for variant, changes in VARIANTS.items()]


def report(preset_name: str, seeds: list[int], command: str) -> None:
    found = {variant: load([result_path(preset_name, variant, seed) for seed in seeds]) for variant in VARIANTS}
    lines = [
        "| variant | seeds | final evaluation | last quarter's evaluations | best evaluation | minutes per run |",
        "|---|---|---|---|---|---|",
    ]
    for variant, done in found.items():
        if done:
            lines.append(
                f"| {variant} | {len(done)} | {spread([r['final_return'] for r in done])} "
                f"| {spread([last_quarter_mean(r['curve']) for r in done])} "
                f"| {spread([r['best_return'] for r in done])} "
                f"| {statistics.median(r['seconds'] for r in done) / 60:.1f} |"
            )
    steps = next((r["steps"] for done in found.values() for r in done), 0)
    image = f"images/ablation-{preset_name}.png"
    text = "\n".join([
        f"## {preset_name}, {steps:,} steps",
        "",
        "Mean ± standard deviation over seeds of the evaluation return (deterministic episodes), with",
        "our DQN's double-DQN targets in every variant.",
        "",
        *lines,
        "",
        f"![evaluation curves]({image})",
        "",
        f"Produced by `{command}`.",
        "",
    ])
    doc = ROOT / "docs" / "ablation.md"
    header = ("# DQN-family ablation\n\nWhat dueling heads, 3-step returns and prioritized replay each add to DQN, "
              "and how QR-DQN compares. Runs of one variant can end hundreds apart (the same update computed with "
              "float rounding in another order can take a run from 190 to -80), so read the table for large "
              "differences only.\n\n")
    sections = doc.read_text().split("\n## ")[1:] if doc.exists() else []
    kept = ["## " + section.rstrip() + "\n" for section in sections if not section.startswith(f"{preset_name},")]
    doc.write_text(header + "\n".join(kept + [text]))
    plot_curves(found, ROOT / "docs" / image, f"{preset_name}: mean over seeds, band from lowest to highest")
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="dqn-lunarlander")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=2, help="runs at once, one torch thread each")
    parser.add_argument("--report", action="store_true", help="only write the report from stored results")
    args = parser.parse_args()
    if not args.report:
        run_missing(runs(args.preset, args.seeds), args.jobs)
    report(args.preset, args.seeds, f"python benchmarks/ablation.py --preset {args.preset} --seeds "
                                    f"{' '.join(map(str, args.seeds))}")


if __name__ == "__main__":
    main()
