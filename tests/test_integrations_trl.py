"""TRL's GRPOTrainer (a Trainer subclass) with the callback: a tiny GPT-2 built from a config, CPU, no download."""

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")


@pytest.mark.parametrize("gives_up", [False, True])
def test_grpo_trainer_feeds_its_per_step_rl_stats_and_evaluates_the_requested_prompts(tmp_path, gives_up):
    """``gives_up``: from step 2 the reward function returns None for every completion, which TRL takes and logs
    as reward None (its mean of no finite value); the adapter dropped it and the stream fell silent, no alarm
    (found by a new user).  The overall reward's None is NaN on a stream that had numbers: the nonfinite alarm."""
    import torch
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer

    from adaptive_eval.integrations.hf import AdaptiveEvalCallback

    words = ["<pad>", "<eos>"] + [str(d) for d in range(10)] + ["+", "="]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(words), n_positions=32, n_embd=32, n_layer=1, n_head=2,
                                       pad_token_id=0, eos_token_id=1, bos_token_id=1))
    prompts = [f"{a} + {b} =" for a in range(10) for b in range(10)]
    answers = [str((a + b) % 10) for a in range(10) for b in range(10)]

    def reward(completions, **kwargs):
        if gives_up and trainer.state.global_step >= 2:
            return [None] * len(completions)
        return [float(c.strip()[:1].isdigit()) for c in completions]

    def evaluate_fn(request):  # the user's eval: greedy completions of the requested prompts, scored per item
        scores = []
        for i in request.indices(len(prompts)):
            ids = tokenizer(prompts[i], return_tensors="pt").input_ids
            with torch.no_grad():
                out = model.generate(ids, max_new_tokens=1, do_sample=False, pad_token_id=0)
            scores.append(float(tokenizer.decode(out[0, ids.shape[1]:]).strip() == answers[i]))
        return {"exact": scores}

    cb = AdaptiveEvalCallback("default", evaluate_fn, overrides=["trigger.freq_steps=2", "policy.sample_size.min=8",
                                                                 "policy.sample_size.initial=16"])
    alarms = []
    args = GRPOConfig(str(tmp_path), max_steps=4, per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=3, report_to=[], use_cpu=True, logging_steps=1, save_strategy="no",
                      disable_tqdm=True)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=Dataset.from_dict(
        {"prompt": prompts}), processing_class=tokenizer, callbacks=[cb])
    trainer.add_callback(_Listen(cb, alarms))
    trainer.train()
    ev = cb.evaluator
    # (TRL's per-function rewards/<f>/mean is None too: in multi-task training a window without the function's
    # task is None by design, so only the overall reward's None is NaN)
    nonfinite = sorted({(a["stream"], a["step"]) for a in alarms if a["detector"] == "nonfinite"})
    assert nonfinite == ([("train/reward", 2)] if gives_up else []), nonfinite
    assert {"train/loss", "train/reward", "train/reward_std", "train/entropy"} <= set(ev._detectors)
    # One reward function: its rewards/<f>/mean and /std are reward and reward_std under other names, each alarm
    # corroborated by its own twin (a probe); left out
    assert not [name for name in ev._detectors if name.startswith("train/rewards/")]
    assert ev._last_step == 3
    assert [r.step for r in ev.history][-1] == 3  # the final weights
    assert all(r["exact"].n == min(r.sample_size, len(prompts)) for r in ev.history)
    assert any("eval_exact" in h for h in trainer.state.log_history)


class _Listen:
    """A callback after the adapter's that listens to its evaluator's events (built in on_train_begin)."""

    def __init__(self, cb, into):
        self.cb, self.into = cb, into

    def __getattr__(self, name):  # (TrainerCallback's other hooks: nothing to do)
        if name.startswith("on_"):
            return lambda *a, **kw: None
        raise AttributeError(name)

    def on_train_begin(self, *args, **kwargs):
        self.cb.evaluator.add_listener(lambda e: e["kind"] == "alarm" and self.into.append(e))


def test_sft_trainer_evaluations_of_the_callback_leave_the_users_own_evaluate_as_it_would_be(tmp_path):
    """TRL's SFTTrainer keeps its evaluation's per-batch metrics (entropy, token accuracy) in _metrics["eval"] until
    its own log() pops them; the callback's evaluations went through its prediction_step and stayed there, so the
    user's trainer.evaluate() afterwards averaged them in: eval_mean_token_accuracy 0.598 where it was 0.784 (a new
    user's probe).  An iterable eval set, which cannot be sampled, is said at the start."""
    import logging

    import torch
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
    from trl import SFTConfig, SFTTrainer

    from adaptive_eval.integrations.hf import AdaptiveEvalCallback

    tok = Tokenizer(models.WordLevel({**{f"t{i}": i for i in range(98)}, "<pad>": 98, "<eos>": 99}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")

    def lm(n, seed):
        g = torch.Generator().manual_seed(seed)
        return Dataset.from_dict({"input_ids": ((torch.randint(0, 98, (n, 1), generator=g) + torch.arange(16)) % 98)
                                  .tolist()})

    def trainer(callbacks, eval_dataset):
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=32))
        args = SFTConfig(str(tmp_path / "out"), max_steps=12, per_device_train_batch_size=8, learning_rate=5e-3,
                         report_to=[], use_cpu=True, disable_tqdm=True, save_strategy="no", eval_strategy="no",
                         seed=0)
        return SFTTrainer(model=model, args=args, train_dataset=lm(200, 0), eval_dataset=eval_dataset,
                          processing_class=tokenizer, callbacks=callbacks)

    cb = AdaptiveEvalCallback("default", overrides=["trigger.freq_steps=4", "policy.budget.enabled=false",
                                                    "evaluation.sample_size=8"])
    with_cb = trainer([cb], lm(30, 1))
    with_cb.train()
    assert len(cb.evaluator.history) >= 2
    without = trainer([], lm(30, 1))
    without.train()
    ours, theirs = with_cb.evaluate(), without.evaluate()
    for key in ("eval_loss", "eval_mean_token_accuracy", "eval_entropy"):
        assert ours[key] == pytest.approx(theirs[key], rel=1e-6), key

    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("adaptive_eval").addHandler(handler)
    try:
        trainer([AdaptiveEvalCallback("default", overrides=["trigger.freq_steps=100"])],
                lm(30, 1).to_iterable_dataset()).train()
    finally:
        logging.getLogger("adaptive_eval").removeHandler(handler)
    assert any("eval_dataset is an iterable dataset (IterableDataset): it has no items to pick a sample from" in m
               and "every evaluation of this run will fail" in m for m in said)
