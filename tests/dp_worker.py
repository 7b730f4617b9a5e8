"""Helper process for tests/test_parallel.py (not a test): trains tiny models with every trainer on N devices.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m tests.dp_worker \
        --data=DIR --workdir=DIR --out=FILE.json --runs=lstm:1,lstm:2,rhn:4

For each MODEL:N it runs `fit` (config.num_devices = N) and records, per step, the running train
perplexity, then the valid/test perplexities and the final parameters (flattened, from the checkpoint); for a
members run (mlstm) the same for each member, from its folder.
With WT_JAX_COORDINATOR etc. set it is one process of a multi-process run (`parallel.initialize_distributed`);
then N = 0 (all devices of all processes) and only process 0 writes --out.
"""
import argparse
import json
from pathlib import Path

from wt_jax import parallel

parallel.initialize_distributed()  # before anything touches a device

import jax
import numpy as np
import orbax.checkpoint as ocp

from tests.conftest import tiny_config
from wt_jax.data import ptb
from wt_jax.train import lm, skipgram

# Tiny versions of each model family (dropout on, so the masks must not depend on the sharding).
MODELS = {
    "lstm": dict(model="lstm_lm", words=dict(mode="tied_projection"), dropout=0.3),
    "rhn": dict(model="rhn_lm", words=dict(mode="tied"), num_layers=1, depth=2, dropout_x=0.2, dropout_i=0.2,
                dropout_h=0.2, dropout_o=0.2, transform_bias=-2.0, remat=False),
}


# Members runs (wt_jax.members): 4 members of a model above, each with its own seed, dropout rate and learning rate.
MEMBER_RUNS = {"mlstm": dict(model="lstm", values="dropout=0.1,0.2,0.3,0.4;learning_rate=0.5,0.4,0.5,0.4")}


def model_config(name: str, vocab_size: int):
  c = tiny_config(vocab_size=vocab_size, batch_size=8, eval_batch_size=8, num_epochs=1, max_steps=24,
                  log_every=1, learning_rate=0.5, **MODELS[name])
  return c


def w2v_config():
  from configs import w2v_untied
  c = w2v_untied.get_config()
  c.dim, c.num_epochs, c.batch_size, c.log_every, c.min_count, c.learning_rate = 8, 1, 256, 1, 1, 0.1
  c.sample = 0.0  # (keep every token of the tiny corpus)
  c.steps_per_call = 4  # (a loss record per call: several records, and calls of several steps)
  return c


def nmt_config():
  from configs import nmt_multi30k
  c = nmt_multi30k.get_config("decoder")
  c.bpe_vocab_size, c.emb_size, c.hidden_size, c.init_scale = 80, 16, 16, 0.1
  c.dropout = 0.2  # the masks must not depend on the sharding
  c.optimizer, c.learning_rate = "adadelta", 30.0  # (Adam turned rounding of ~0 gradients into 2e-4 diffs)
  c.batch_size, c.eval_batch_size, c.num_epochs = 20, 20, 1
  c.buckets, c.max_len, c.beam_size, c.log_every, c.plot = (16,), 15, 2, 1, False
  return c


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--data", required=True)
  ap.add_argument("--workdir", required=True)
  ap.add_argument("--out", required=True)
  ap.add_argument("--runs", default="lstm:1", help="MODEL:NUM_DEVICES,...")
  args = ap.parse_args()
  corpus = ptb.load(args.data, download=False)
  out = {}
  for run in args.runs.split(","):
    name, n = run.split(":")
    workdir = Path(args.workdir) / f"{name}_{n}"
    if name == "nmt":  # the translation trainer, on a generated Multi30k-format corpus
      from tests.conftest import write_parallel
      from wt_jax.data import multi30k
      from wt_jax.train import nmt
      write_parallel(Path(args.workdir) / "nmt_data" / "multi30k", n_train=200, n_eval=20)
      config = nmt_config()
      config.num_devices = int(n)
      results = nmt.fit_nmt(config, multi30k.load_pair("en", "de", str(Path(args.workdir) / "nmt_data")),
                                 workdir)
      step = results["history"][-1]["step"]
      curve, valid, test, processes = "train_ppl", results["valid_ppl"], results["test_ppl"], jax.process_count()
    elif name in ("w2v", "w2vw"):  # the skip-gram trainer: loss per pair at every step, no perplexities
      config = w2v_config()
      config.num_devices = int(n)
      if name == "w2vw":  # the text in order, noise shared by a window; a step a call, so a call's end syncs
        config.batching, config.shared_negatives, config.batch_size, config.steps_per_call = "windows", True, 32, 1
      results = skipgram.fit_skipgram(config, ptb.sentences("train", args.data, download=False), workdir)
      step = results["steps"]
      curve, valid, test, processes = "loss_per_pair", None, None, jax.process_count()
    elif name in MEMBER_RUNS:  # K members of one run: the member axis (and the batch) over the devices
      config = model_config(MEMBER_RUNS[name]["model"], corpus.vocab_size)
      config.member_values, config.num_devices = MEMBER_RUNS[name]["values"], int(n)
      summary = lm.fit(config, corpus, workdir)
      if parallel.is_writer():
        out[run] = {"members": [], "num_devices": None}
      for k in range(summary["members"]):
        folder = workdir / "members" / str(k)
        results = json.loads((folder / "results.json").read_text())
        params = ocp.StandardCheckpointer().restore(
            (folder / "checkpoints" / "last" / str(results["steps"]) / "state").absolute())["params"]
        if parallel.is_writer():
          steps = [json.loads(l) for l in (folder / "metrics.jsonl").read_text().splitlines()]
          flat = np.concatenate([np.ravel(np.asarray(p)) for p in jax.tree_util.tree_leaves(params)])
          out[run]["members"].append({"train_ppl": [r["train_ppl"] for r in steps if r["kind"] == "train"],
                                      "valid_ppl": results["valid_ppl"], "test_ppl": results["test_ppl"],
                                      "params": flat.tolist()})
          out[run].update(num_devices=results["num_devices"], num_processes=results["num_processes"])
      continue
    else:
      config = model_config(name, corpus.vocab_size)
      config.num_devices = int(n)
      results = lm.fit(config, corpus, workdir)
      step = results["steps"]
      curve, valid, test, processes = "train_ppl", results["valid_ppl"], results["test_ppl"], results["num_processes"]
    ckpt = workdir / "checkpoints" / "last" / str(step) / "state"
    params = ocp.StandardCheckpointer().restore(ckpt.absolute())["params"]  # (every process: orbax syncs)
    if not parallel.is_writer():
      continue
    steps = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
    flat = np.concatenate([np.ravel(np.asarray(p)) for p in jax.tree_util.tree_leaves(params)])
    out[run] = {"train_ppl": [r[curve] for r in steps if r["kind"] == "train"],
                "valid_ppl": valid, "test_ppl": test, "num_devices": results["num_devices"],
                "num_processes": processes, "params": flat.tolist(),
                "params_dtypes": sorted({str(np.asarray(p).dtype) for p in jax.tree_util.tree_leaves(params)})}
  if parallel.is_writer():
    Path(args.out).write_text(json.dumps(out))


if __name__ == "__main__":
  main()
