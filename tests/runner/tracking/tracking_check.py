"""Reads what Tailor's trackers wrote back through the trackers' own
libraries and compares it with the run's metrics.jsonl, line by line.

  tracking_check.py tensorboard DIR METRICS_JSONL
      TensorBoard's event accumulator: every number of every line as a
      scalar at its step with its value (as float32, what the format keeps),
      the plan's estimates at step 0, the spec and plan text summaries.
  tracking_check.py wandb RUN_DIR METRICS_JSONL
      the offline W&B run tailor-wandb made of a TensorBoard folder, read
      from its .wandb file (LevelDB-log framing of wandb's Record protos):
      every number of every line in the history row of its step.
  tracking_check.py mlflow URI RUN_ID METRICS_JSONL STATUS
      MLflow's client: every number of every line in the run's metric
      history at its step with its exact value, the spec's and the plan's
      params, the final status.

Prints a JSON summary; exits 1 with the first differences otherwise.
The names are the documented ones (docs/tracking.md), spelled out again
here rather than taken from the C++ code under test.
"""
import json
import sys


def scalars(line):
    out = {}

    def add(v, tag):
        if isinstance(v, bool):
            out[tag] = 1.0 if v else 0.0
        elif isinstance(v, (int, float)):
            out[tag] = float(v)
        elif isinstance(v, dict):
            for k, x in v.items():
                add(x, tag + "/" + k)

    for k, v in line.items():
        if k in ("step", "time"):
            continue
        if k.startswith("eval_"):
            add(v, "eval/" + k[len("eval_"):])
        elif k == "memory":
            for m, x in v.items():
                add(x, "memory/" + m)
        elif k == "host":
            for m, x in v.items():
                add(x, "memory_host/" + m)
        elif k == "ranks":
            for rank in v:
                for m, x in rank.items():
                    if m != "rank":
                        add(x, "rank%d/%s" % (rank["rank"], m))
        else:
            add(v, "train/" + k)
    return out


def read_lines(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def fail(problems):
    print("\n".join(problems[:20]))
    print("(%d differences)" % len(problems))
    sys.exit(1)


def check_tensorboard(folder, metrics):
    import numpy as np
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(folder, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    have = {}
    for tag in tags["scalars"]:
        for e in acc.Scalars(tag):
            have[(tag, e.step)] = e.value
    problems, checked = [], 0
    for line in read_lines(metrics):
        for tag, value in scalars(line).items():
            got = have.get((tag, line["step"]))
            want = float(np.float32(value))
            checked += 1
            if got is None:
                problems.append("%s at step %d: missing" % (tag, line["step"]))
            elif got != want:
                problems.append("%s at step %d: %r, expected %r" % (tag, line["step"], got, want))
    estimated = [t for t in tags["scalars"] if t.startswith("memory_estimated/")]
    if not estimated or not all((t, 0) in have for t in estimated):
        problems.append("no memory_estimated/* scalars at step 0")
    texts = {}
    for tag in ("spec", "plan"):
        if tag not in tags["tensors"]:
            problems.append("no %s text summary" % tag)
            continue
        t = acc.Tensors(tag)[0]
        texts[tag] = t.tensor_proto.string_val[0].decode()
    if "spec" in texts and "apiVersion: tailor/v1" not in texts["spec"]:
        problems.append("the spec text is not the resolved spec: %r" % texts["spec"][:200])
    if problems:
        fail(problems)
    print(json.dumps({"scalars_checked": checked, "tags": len(tags["scalars"]), "estimated": len(estimated),
                      "texts": sorted(texts)}))


def check_mlflow(uri, run_id, metrics, status):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    problems = []
    if run.info.status != status:
        problems.append("status %s, expected %s" % (run.info.status, status))
    lines = read_lines(metrics)
    wanted = {}
    for line in lines:
        for tag, value in scalars(line).items():
            wanted.setdefault(tag, {})[line["step"]] = value
    checked = 0
    for tag, by_step in wanted.items():
        history = {m.step: m.value for m in client.get_metric_history(run_id, tag)}
        for step, value in by_step.items():
            checked += 1
            if step not in history:
                problems.append("%s at step %d: missing" % (tag, step))
            elif history[step] != value:
                problems.append("%s at step %d: %r, expected %r" % (tag, step, history[step], value))
    params = run.data.params
    for key in ("spec.model.preset", "spec.training.max_steps", "plan.precision", "plan.micro_batch_size"):
        if key not in params:
            problems.append("param %s missing (have %s)" % (key, sorted(params)[:10]))
    if run.data.tags.get("tailor.job") is None:
        problems.append("no tailor.job tag")
    if problems:
        fail(problems)
    print(json.dumps({"metrics_checked": checked, "keys": len(wanted), "params": len(params),
                      "status": run.info.status, "steps": len(lines)}))


def wandb_records(path):
    """The Record protos of a .wandb file: a 7-byte header (":W&B", the
    magic 0xBEE1, a version), then LevelDB's log format: 32 KiB blocks of
    chunks (crc32, length, type), a record split over FIRST/MIDDLE/LAST."""
    import struct
    from wandb.proto import wandb_internal_pb2 as pb

    data = open(path, "rb").read()
    assert data[:4] == b":W&B" and struct.unpack("<H", data[4:6])[0] == 0xBEE1, "not a .wandb file"
    block, pos, buf = 32768, 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and n == 0:
            pos += block - pos % block
            continue
        buf += data[pos + 7:pos + 7 + n]
        pos += 7 + n
        if kind in (1, 4):  # FULL, LAST
            rec = pb.Record()
            rec.ParseFromString(buf)
            buf = b""
            yield rec


def check_wandb(run_dir, metrics):
    import glob
    import numpy as np

    files = glob.glob(run_dir + "/run-*.wandb")
    if len(files) != 1:
        fail(["%s: expected one run-*.wandb file, found %r" % (run_dir, files)])
    rows = {}
    for rec in wandb_records(files[0]):
        if rec.WhichOneof("record_type") == "history":
            row = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item}
            rows[row["_step"]] = row
    problems, checked = [], 0
    for line in read_lines(metrics):
        row = rows.get(line["step"], {})
        for tag, value in scalars(line).items():
            checked += 1
            want = float(np.float32(value))
            if row.get(tag) != want:
                problems.append("%s at step %d: %r, expected %r" % (tag, line["step"], row.get(tag), want))
    if problems:
        fail(problems)
    print(json.dumps({"points_checked": checked, "rows": len(rows)}))


if __name__ == "__main__":
    if sys.argv[1] == "tensorboard":
        check_tensorboard(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "wandb":
        check_wandb(sys.argv[2], sys.argv[3])
    else:
        check_mlflow(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
