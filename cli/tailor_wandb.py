#!/usr/bin/env python3
"""usage: tailor-wandb LOGDIR [--project P] [--name N] [--dir D] [--output json]

Turns a job's TensorBoard event files (tracking.tensorboard: its output
folder, or the folder tracking.tensorboard.dir names) into a Weights &
Biases run, offline: no account and no network. Every scalar goes in at
its TensorBoard step, and the job's resolved spec and plan become the run's
config and notes. `wandb sync` then uploads the run it prints, for example
later from a machine that can reach W&B.

Needs Python with wandb and tensorboard (pip install wandb tensorboard).

options:
  --project P       W&B project (default: tailor)
  --name N          run name (default: LOGDIR's folder name, the job's folder)
  --dir D           where wandb writes the offline run (default: LOGDIR)
  --output json     print {"run_dir": ..., "steps": ..., "scalars": ...}

exit codes: 0 converted, 1 no event files or a conversion error,
2 bad command line or wandb/tensorboard missing
"""
import argparse
import json
import os
import sys


def fail(message, code=1):
    print("tailor-wandb: " + message, file=sys.stderr)
    sys.exit(code)


def main():
    ap = argparse.ArgumentParser(prog="tailor-wandb", add_help=False)
    ap.add_argument("logdir")
    ap.add_argument("--project", default="tailor")
    ap.add_argument("--name")
    ap.add_argument("--dir")
    ap.add_argument("--output", choices=["text", "json"], default="text")
    ap.add_argument("-h", "--help", action="store_true")
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(__doc__.strip())
        return 0
    ap.error = lambda message: fail(message + "\n" + __doc__.strip().splitlines()[0], 2)
    args = ap.parse_args()
    if not os.path.isdir(args.logdir):
        fail(args.logdir + ": no such folder", 2)
    try:
        from tensorboard.backend.event_processing import event_accumulator as ea
        import wandb
    except ImportError as e:
        fail("%s is not installed here (%s): pip install wandb tensorboard" % (e.name, sys.executable), 2)

    acc = ea.EventAccumulator(args.logdir, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    if not tags.get("scalars"):
        fail(args.logdir + ": no TensorBoard scalars here (is tracking.tensorboard on for this job?)")
    # One row per step; a step written twice (a resumed runner redid it)
    # keeps its newest values, as TensorBoard's charts show.
    rows = {}
    for tag in tags["scalars"]:
        for e in acc.Scalars(tag):
            rows.setdefault(e.step, {})[tag] = e.value
    texts = {}
    for tag in ("spec", "plan"):
        if tag in tags.get("tensors", []):
            texts[tag] = acc.Tensors(tag)[-1].tensor_proto.string_val[0].decode("utf-8", "replace")

    name = args.name or os.path.basename(os.path.abspath(args.logdir.rstrip("/")))
    run = wandb.init(mode="offline", project=args.project, name=name, dir=args.dir or args.logdir,
                     config={"tailor_spec": texts.get("spec", "")}, notes=texts.get("plan"),
                     settings=wandb.Settings(silent=True, console="off"))
    for step in sorted(rows):
        run.log(rows[step], step=step)
    run_dir = os.path.dirname(run.dir)  # .../wandb/offline-run-*/files -> the run's folder
    run.finish()
    points = sum(len(r) for r in rows.values())
    if args.output == "json":
        print(json.dumps({"run_dir": run_dir, "steps": len(rows), "scalars": points}))
    else:
        print("tailor-wandb: %d steps, %d points in the offline run %s" % (len(rows), points, run_dir))
        print("upload it with:  wandb sync %s" % run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
