"""``adaptive-eval demo --task rlvr``: reinforcement learning with verifiable rewards, on the CPU, in a minute.

The run looks like our users' LLM runs, scaled down until two CPU cores train it in seconds:

* **The policy**: a tiny decoder-only transformer (2 layers, width 32, 27k parameters, built from scratch;
  nothing is downloaded) over a 14-token vocabulary (the digits, ``+``, ``=``, end, padding).
* **The task**: multi-digit addition with a checkable answer.  A prompt is ``a+b=`` with both operands
  zero-padded to 4 digits and written least-significant digit first (the order in which a small
  transformer can add, Lee et al. 2023); the answer is the sum's digits in the same order, then the end
  token.  The reward is 1 for the exact answer, else 0.
* **The base model**: the policy is first trained briefly by supervised learning on 1- to 4-digit sums
  with label smoothing (:data:`BASE_STEPS` steps; about 10 s of CPU), so that it knows the task but samples
  noisily, as a pretrained LLM does before RL.  It is the reference of the KL term.
* **GRPO**: every step samples :data:`GROUP` answers to each of :data:`PROMPTS` fresh 1- to 3-digit
  problems (all ``PROMPTS x GROUP`` in one batched generation), scores them, takes group-relative
  advantages (reward minus the group mean, over the group's std), and makes two minibatch updates of
  the clipped objective (ratio clipped to 1 +- :data:`CLIP`) with a k3 KL penalty to the base model
  (:data:`KL_COEF`).  ``observe`` gets the cheap streams every step: ``train/reward``,
  ``train/response_length``, ``train/kl``, ``train/entropy``, ``train/loss``.
* **Two eval suites**, in the spirit of MATH500 and AIME24: ``id``, :data:`ID_SIZE` problems from the
  training distribution, each answered :data:`ID_SAMPLES` times, and ``ood``, :data:`OOD_SIZE` harder
  4-digit problems (longer than any RL prompt), each answered :data:`OOD_SAMPLES` times.  The
  evaluation function returns items x samples 0/1 correctness per suite; the library reports mean@k
  (``<suite>/accuracy``) and pass@k with intervals over problems (the problem is what was sampled
  independently, not one of its answers).
* **The fault**, injected at the middle step (``--fault``): ``reward_hack`` (the default: the
  verifier's reference answers lose their carries, a data bug; the policy learns to drop carries, so
  the training reward climbs back while the held-out accuracy falls, the case where the cheap stream
  lies and only evaluation shows the truth), ``lr_blowup`` (the learning rate x :data:`LR_FAULT_FACTOR`),
  ``entropy_collapse`` (a sign bug turns the entropy bonus into a penalty of weight
  :data:`ENTROPY_FAULT_COEF`: sampling turns deterministic; on this task that sharpens the policy and the
  held-out accuracy does not fall, a fault that evaluation rightly finds harmless), or ``none``.

The policy is trained once; its weights are kept at every step, so the runs compared see exactly the
same models: ``adaptive`` (the default preset, or ``config``, evaluating while the policy trains; the
``ood`` suite at every :data:`OOD_EVERY`-th evaluation, on alarms and at the end; told of a kept checkpoint
every :data:`CHECKPOINT_EVERY` steps, as a trainer saving them would tell it, so that after a fall it
evaluates the last one from before, ``policy.lookback``), ``async`` (the same
with ``evaluation.asynchronous``: a :class:`~adaptive_eval.asynchronous.SnapshotEval` copy of the weights
evaluated on its own simulated device and integrated :data:`ASYNC_LATENCY` steps later), ``fixed``
(the plain AReaL schedule, both whole suites every ``k`` steps, ``k`` the longest interval that generates
at least as many answers as the adaptive run; run afterwards from the kept weights) and ``fixed_same`` (the
AReaL schedule at the adaptive run's per-evaluation size: its mean ``id`` problems and answers per problem,
``ood`` whole at every :data:`OOD_EVERY`-th evaluation as the adaptive runs do it, every ``k`` steps, ``k``
the longest interval that generates at least as many answers as the adaptive run; see :func:`same_size`).  Each item's answers
are drawn from its own seeded numbers, so runs that evaluate an item at the same step get the same answers
(they are generated once).  The evaluators' clock is simulated (:data:`SIMULATED_COSTS`: 60 s a training
step, 5 s + 0.05 s per generated answer an evaluation), so budgets act as they would on a real run; the
wall time in the table is that simulated time.  The true value of each suite at
every step is exact, not estimated: the probability that the policy samples the right answer is the
product of its token probabilities along that answer, averaged over the suite's problems (pass@k from
the same per-problem probabilities).  It is used only to score the runs and to write the trace.

Outputs, in ``out_dir``: ``adaptive/``, ``async/``, ``fixed_same/`` and ``fixed/`` as replay writes them (``evals.jsonl``,
``alarms.jsonl``, ``summary.json``, ``tb/``) plus ``run.png``; ``comparison.png`` (the runs' evaluations
over the exact curve), ``comparison.json`` (the figures :func:`format_comparison` prints), and
``trace.csv`` (the streams and, as ``eval/id/accuracy`` and ``eval/ood/accuracy``, the exact accuracies
every :data:`TRUTH_EVERY` steps) for ``adaptive-eval replay`` and ``adaptive-eval tune``.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from adaptive_eval.config import as_config, load_config
from adaptive_eval.demos import DemoError, prepare_out
from adaptive_eval.replay import ReplayResult, SimClock, _strict, write_outputs
from adaptive_eval.scoring import confirmed_delay, pick_best

__all__ = ["DEFAULT_FAULT", "DEFAULT_STEPS", "FAULTS", "format_comparison", "run_demo"]

DEFAULT_STEPS = 200           # GRPO steps; the fault comes at the middle one
MIN_STEPS = 20
BASE_STEPS = 260              # supervised warm-up of the base model (not evaluated)
BASE_LR = 1e-2
BASE_BATCH = 128
BASE_LABEL_SMOOTHING = 0.15
PROMPTS = 16                  # problems per GRPO step
GROUP = 8                     # answers sampled per problem
LR = 1e-3
CLIP = 0.2
KL_COEF = 0.02
ENTROPY_COEF = 0.001          # the entropy bonus of the recipe (its sign flips under entropy_collapse)
MINIBATCHES = 2               # updates per batch of rollouts: the clipped ratio matters from the second
WIDTH, LAYERS, HEADS = 32, 2, 4
ID_SIZE, ID_SAMPLES = 300, 4
OOD_SIZE, OOD_SAMPLES = 30, 8
PASS_K = 4
OOD_EVERY = 4                 # adaptive runs: the ood suite at every 4th evaluation, on alarms, at the end
ASYNC_LATENCY = 2             # steps from submitting an asynchronous evaluation to integrating its result
CHECKPOINT_EVERY = 10         # the adaptive run keeps a checkpoint every 10 steps (checkpoint_saved: policy.lookback)
LR_FAULT_FACTOR = 30.0
ENTROPY_FAULT_COEF = 0.5
FAULTS = {
    "reward_hack": "reward bug: the verifier's answers lose their carries",
    "lr_blowup": f"learning rate x{LR_FAULT_FACTOR:g}",
    "entropy_collapse": f"entropy bonus sign bug (penalty {ENTROPY_FAULT_COEF:g})",
    "none": "no fault",
}
DEFAULT_FAULT = "reward_hack"
METRIC = "id/accuracy"
SUITES = {"id": (ID_SIZE, ID_SAMPLES), "ood": (OOD_SIZE, OOD_SAMPLES)}
RUNS = ("adaptive", "async", "fixed_same", "fixed")
TRACE_NAME = "trace.csv"
# The simulated clock, in the proportions of an LLM GRPO run: a step (rollouts and update) takes a minute,
# an evaluation 5 s plus 0.05 s per generated answer (both whole suites: 1440 answers, 77 s).
SIMULATED_COSTS = ("replay.step_seconds=60", "replay.eval_fixed_seconds=5", "replay.eval_seconds_per_sample=0.05")

# Token ids.
EOS, PAD, PLUS, EQUALS = 12, 13, 10, 11
VOCAB = 14
DIGITS = 4                           # operand field width
PROMPT_LEN = 2 * DIGITS + 2
MAX_ANSWER = DIGITS + 2              # up to 5 digits, then the end token
SEQ_LEN = PROMPT_LEN + MAX_ANSWER


# --- the task ---------------------------------------------------------------------------------------

def _numbers(rng: np.random.Generator, n: int, min_digits: int, max_digits: int) -> np.ndarray:
    """``n`` integers whose digit counts are uniform over ``[min_digits, max_digits]``."""
    digits = rng.integers(min_digits, max_digits + 1, n)
    low = np.where(digits > 1, 10 ** (digits - 1), 0)
    return (low + (rng.random(n) * (10 ** digits - low)).astype(np.int64)).astype(np.int64)


def problems(rng: np.random.Generator, n: int, min_digits: int, max_digits: int) -> tuple[np.ndarray, np.ndarray]:
    return _numbers(rng, n, min_digits, max_digits), _numbers(rng, n, min_digits, max_digits)


def encode_prompts(a: np.ndarray, b: np.ndarray):
    import torch

    p = np.empty((len(a), PROMPT_LEN), dtype=np.int64)
    for j in range(DIGITS):
        p[:, j] = (a // 10 ** j) % 10
        p[:, DIGITS + 1 + j] = (b // 10 ** j) % 10
    p[:, DIGITS] = PLUS
    p[:, 2 * DIGITS + 1] = EQUALS
    return torch.from_numpy(p)


def encode_answers(values: np.ndarray):
    """The sums as answer tokens: digits least-significant first, the end token, then padding."""
    import torch

    out = np.full((len(values), MAX_ANSWER), PAD, dtype=np.int64)
    for i, v in enumerate(values.tolist()):
        tokens = [int(c) for c in reversed(str(v))] + [EOS]
        out[i, :len(tokens)] = tokens
    return torch.from_numpy(out)


def no_carry_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Digit-wise sums mod 10: what the buggy verifier of the ``reward_hack`` fault takes for the answer."""
    out = np.zeros_like(a)
    for j in range(DIGITS):
        out += ((a // 10 ** j + b // 10 ** j) % 10) * 10 ** j
    return out


def answer_mask(tokens):
    """Positions that belong to the answer: up to and including the first end token."""
    import torch

    is_end = (tokens == EOS).int()
    return (torch.cumsum(is_end, 1) - is_end == 0) & (tokens != PAD)


def is_correct(responses, answers):
    """Exact match, end token included, padding after it ignored."""
    import torch

    return (torch.where(answer_mask(responses), responses, PAD) == answers).all(1)


# --- the policy --------------------------------------------------------------------------------------

def _policy_class():
    import torch
    from torch import nn

    class Policy(nn.Module):
        """A tiny causal transformer: token + position embeddings, pre-norm encoder layers, a linear head."""

        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(VOCAB, WIDTH)
            self.pos = nn.Embedding(SEQ_LEN, WIDTH)
            layer = nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, dropout=0.0, batch_first=True,
                                               norm_first=True)
            self.body = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(WIDTH)
            self.head = nn.Linear(WIDTH, VOCAB)
            self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(SEQ_LEN),
                                 persistent=False)

        def forward(self, x):
            n = x.shape[1]
            h = self.tok(x) + self.pos.weight[:n]
            h = self.body(h, mask=self.causal[:n, :n], is_causal=True)
            return self.head(self.norm(h))

    return Policy


def generate(model, prompts, uniforms):
    """Sample one answer per prompt row (temperature 1), all rows in one batch; also each token's
    log-probability under the sampling policy.

    ``uniforms`` (rows x :data:`MAX_ANSWER`, in [0, 1)) drive the sampling by inverting each step's
    cumulative distribution, so a row's answer depends only on its own numbers and not on the batch it
    is in (an evaluation of some items answers them exactly as one of all items would)."""
    import torch

    n = prompts.shape[0]
    seq = prompts
    done = torch.zeros(n, dtype=torch.bool)
    tokens, logps = [], []
    with torch.inference_mode():
        for t in range(MAX_ANSWER):
            logp = torch.log_softmax(model(seq)[:, -1].float(), -1)
            probs = torch.nan_to_num(logp.exp(), nan=0.0, posinf=0.0)
            broken = probs.sum(1) <= 0   # diverged weights (lr_blowup): the answer is noise, not a crash
            probs[broken] = 1.0
            cdf = torch.cumsum(probs, 1)
            tok = (cdf < uniforms[:, t:t + 1] * cdf[:, -1:]).sum(1).clamp(max=VOCAB - 1)
            tok = torch.where(done, torch.full_like(tok, PAD), tok)
            tokens.append(tok)
            logps.append(logp.gather(1, tok.clamp(max=VOCAB - 1)[:, None]).squeeze(1))
            done = done | (tok == EOS)
            seq = torch.cat([seq, tok[:, None]], 1)
            if bool(done.all()):
                break
    pad = MAX_ANSWER - len(tokens)
    resp = torch.cat([torch.stack(tokens, 1), torch.full((n, pad), PAD)], 1)
    old = torch.cat([torch.stack(logps, 1), torch.zeros(n, pad)], 1)
    return resp, old


def token_logprobs(model, prompts, responses):
    """Log-probability of each answer token and the policy's entropy at each answer position."""
    import torch

    seq = torch.cat([prompts, responses], 1)
    logp = torch.log_softmax(model(seq[:, :-1])[:, PROMPT_LEN - 1:], -1)
    lp = logp.gather(-1, responses.clamp(max=VOCAB - 1)[..., None]).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return lp, entropy


# --- the training run ----------------------------------------------------------------------------------

class _Suite:
    def __init__(self, name: str, a: np.ndarray, b: np.ndarray, samples: int):
        self.name, self.size, self.samples = name, len(a), samples
        self.prompts = encode_prompts(a, b)
        self.answers = encode_answers(a + b)


class _Training:
    """The seeded GRPO run: base model, policy, rollouts, the fault, the weights at every step."""

    def __init__(self, seed: int, fault: str, fault_step: int):
        import torch

        self.torch = torch
        self.seed, self.fault, self.fault_step = seed, fault, fault_step
        self.rng = np.random.default_rng([seed, 1])
        self.gen = torch.Generator().manual_seed(seed)   # the rollouts' sampling
        self.suites = {"id": _Suite("id", *problems(np.random.default_rng([seed, 2]), ID_SIZE, 1, 3), ID_SAMPLES),
                       "ood": _Suite("ood", *problems(np.random.default_rng([seed, 3]), OOD_SIZE, 4, 4),
                                     OOD_SAMPLES)}
        policy = _policy_class()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.model = policy()
            self.reference = policy()
            self.evaluated = policy()
        started = time.perf_counter()
        self._train_base()
        self.base_seconds = time.perf_counter() - started
        self.reference.load_state_dict(self.model.state_dict())
        self.reference.requires_grad_(False)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=LR)
        self.weights: dict[int, dict] = {}
        self._answers: dict[tuple, dict[int, np.ndarray]] = {}   # (step, suite, samples, seed) -> item -> row

    def _train_base(self) -> None:
        torch = self.torch
        opt = torch.optim.Adam(self.model.parameters(), lr=BASE_LR)
        for _ in range(BASE_STEPS):
            a, b = problems(self.rng, BASE_BATCH, 1, 4)
            prompts, answers = encode_prompts(a, b), encode_answers(a + b)
            logits = self.model(torch.cat([prompts, answers], 1)[:, :-1])[:, PROMPT_LEN - 1:]
            mask = answer_mask(answers)
            loss = torch.nn.functional.cross_entropy(logits[mask], answers[mask],
                                                     label_smoothing=BASE_LABEL_SMOOTHING)
            opt.zero_grad()
            loss.backward()
            opt.step()

    def reference_answers(self, a: np.ndarray, b: np.ndarray, global_step: int) -> np.ndarray:
        """The answers the verifier rewards at ``global_step``: the sums, or without their carries from the
        fault on under ``reward_hack``."""
        if self.fault == "reward_hack" and global_step >= self.fault_step:
            return no_carry_sum(a, b)
        return a + b

    def entropy_coef(self, global_step: int) -> float:
        """The entropy bonus's weight: negative (a penalty) from the fault on under ``entropy_collapse``."""
        if self.fault == "entropy_collapse" and global_step >= self.fault_step:
            return -ENTROPY_FAULT_COEF
        return ENTROPY_COEF

    def step(self, global_step: int) -> dict[str, float]:
        """One GRPO step; the cheap streams."""
        torch = self.torch
        if self.fault == "lr_blowup" and global_step == self.fault_step:
            for group in self.opt.param_groups:
                group["lr"] = LR * LR_FAULT_FACTOR
        a, b = problems(self.rng, PROMPTS, 1, 3)
        prompts = encode_prompts(a, b).repeat_interleave(GROUP, 0)
        answers = encode_answers(self.reference_answers(a, b, global_step)).repeat_interleave(GROUP, 0)
        self.model.eval()
        responses, old = generate(self.model, prompts, torch.rand(len(prompts), MAX_ANSWER, generator=self.gen))
        reward = is_correct(responses, answers).float()
        grouped = reward.view(PROMPTS, GROUP)
        advantage = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(-1)
        mask = answer_mask(responses).float()
        with torch.inference_mode():
            ref_lp, _ = token_logprobs(self.reference, prompts, responses)
        entropy_coef = self.entropy_coef(global_step)
        self.model.train()
        losses, kls, entropies = [], [], []
        for part in range(MINIBATCHES):
            rows = torch.arange(part, len(prompts), MINIBATCHES)
            m = mask[rows]
            lp, entropy = token_logprobs(self.model, prompts[rows], responses[rows])
            ratio = torch.exp(lp - old[rows])
            adv = advantage[rows][:, None]
            policy_loss = -torch.min(ratio * adv, ratio.clamp(1 - CLIP, 1 + CLIP) * adv)
            log_ratio = ref_lp[rows] - lp
            kl = torch.exp(log_ratio) - log_ratio - 1
            per_token = policy_loss + KL_COEF * kl - entropy_coef * entropy
            loss = ((per_token * m).sum(1) / m.sum(1)).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            losses.append(loss.item())
            kls.append(((kl * m).sum() / m.sum()).item())
            entropies.append(((entropy * m).sum() / m.sum()).item())
        self.weights[global_step] = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        return {"train/reward": reward.mean().item(), "train/response_length": mask.sum(1).mean().item(),
                "train/kl": float(np.mean(kls)), "train/entropy": float(np.mean(entropies)),
                "train/loss": float(np.mean(losses))}

    def true_values(self) -> dict[str, float]:
        """Each suite's exact mean@1 and pass@k of the current policy (see the module docstring)."""
        torch = self.torch
        self.model.eval()
        out = {}
        with torch.inference_mode():
            for name, suite in self.suites.items():
                lp, _ = token_logprobs(self.model, suite.prompts, suite.answers)
                p = torch.exp((lp * answer_mask(suite.answers)).sum(1)).double()
                out[f"{name}/accuracy"] = p.mean().item()
                out[f"{name}/accuracy/pass@{PASS_K}"] = (1 - (1 - p) ** PASS_K).mean().item()
        return out

    def answers_of(self, weights, step: int, suite: _Suite, items: Sequence[int], samples: int,
                   request_seed: int) -> np.ndarray:
        """items x samples 0/1 correctness of the policy of ``step`` (``weights``), the answers of all items
        in one batch.  Each item's answers are drawn from its own seeded numbers (run seed, request seed,
        step, suite, item), so every run that evaluates that item at that step gets the same answers: the
        runs differ only in what they evaluate when.  Answers already generated are reused."""
        torch = self.torch
        cache = self._answers.setdefault((step, suite.name, samples, request_seed), {})
        todo = [i for i in dict.fromkeys(items) if i not in cache]
        if todo:
            self.evaluated.load_state_dict(weights)
            self.evaluated.eval()
            index = torch.as_tensor(todo, dtype=torch.long)
            suite_id = list(SUITES).index(suite.name)
            uniforms = np.concatenate([
                np.random.default_rng([self.seed, request_seed, step, suite_id, i]).random((samples, MAX_ANSWER))
                for i in todo])
            responses, _ = generate(self.evaluated, suite.prompts[index].repeat_interleave(samples, 0),
                                    torch.from_numpy(uniforms))
            ok = is_correct(responses, suite.answers[index].repeat_interleave(samples, 0))
            for i, row in zip(todo, ok.view(len(todo), samples).numpy().astype(np.float64)):
                cache[i] = row
        return np.stack([cache[i] for i in items]) if items else np.zeros((0, samples))

    def truth_at(self, step: int) -> dict[str, float]:
        """:meth:`true_values` of the policy of ``step`` (from its kept weights)."""
        current = self.model.state_dict()
        saved = {k: v.clone() for k, v in current.items()}
        self.model.load_state_dict(self.weights[step])
        try:
            return self.true_values()
        finally:
            self.model.load_state_dict(saved)


# --- evaluation ----------------------------------------------------------------------------------------

class _Evaluation:
    """The ``evaluate_fn`` of one run: answers each problem of each due suite ``samples_per_item`` times
    (one batch per suite), charges ``clock`` (the training clock, or the eval device's when asynchronous)
    for the answers it generated, and counts them."""

    def __init__(self, training: _Training, clock: SimClock, cfg):
        self.training, self.clock = training, clock
        self.eval_fixed = float(cfg.replay.eval_fixed_seconds)
        self.per_answer = float(cfg.replay.eval_seconds_per_sample)
        self.generated: dict[int, int] = {}   # step -> answers generated by the evaluation at that step

    def __call__(self, request, weights=None) -> dict:
        """``weights``: a :class:`~adaptive_eval.asynchronous.WeightSnapshot` of the request's step (the
        asynchronous run's :class:`~adaptive_eval.asynchronous.SnapshotEval`), else the kept weights."""
        out = {}
        generated = 0
        if weights is None:  # (a kept checkpoint, request.checkpoint, is its step's weights: request.step)
            weights = self.training.weights[request.step if request.checkpoint is None else int(request.checkpoint)]
        for name, part in request.suites.items():
            ok = self.training.answers_of(weights, request.step, self.training.suites[name], part.indices,
                                          part.samples_per_item, request.seed)
            out[f"{name}/accuracy"] = ok   # items x samples of 0/1: mean@k and pass@k over items
            generated += ok.size
        self.clock.eval_time += self.eval_fixed + self.per_answer * generated
        self.generated[request.step] = self.generated.get(request.step, 0) + generated
        return out


def _full_eval_answers() -> int:
    return ID_SIZE * ID_SAMPLES + OOD_SIZE * OOD_SAMPLES


def _overrides(*, adaptive: bool) -> list[str]:
    """The demo's settings under the user's: the two suites, pass@k, the tracked metric, the simulated costs.
    The adaptive runs size the id suite by policy and run the small ood suite at every
    :data:`OOD_EVERY`-th evaluation (and on alarms and at the end); the fixed run evaluates both whole."""
    out = [f"evaluation.metric={METRIC}", f"evaluation.pass_at_k=[{PASS_K}]", *SIMULATED_COSTS]
    for name, (size, samples) in SUITES.items():
        out += [f"evaluation.suites.{name}.size={size}", f"evaluation.suites.{name}.samples_per_item={samples}"]
    if adaptive:
        out += [f"evaluation.suites.ood.every={OOD_EVERY}", f"evaluation.suites.ood.sample_size={OOD_SIZE}"]
    return out


def same_size(evals: Sequence[dict]) -> dict:
    """The fixed same-size schedule's evaluation, from the adaptive run's ``evals``: its mean id problems and
    mean answers per problem (rounded), ood as the adaptive runs do it (whole, every :data:`OOD_EVERY`-th
    evaluation); ``per_eval``: the answers one evaluation then generates on average.

    >>> same_size([{"n": {"id/accuracy": 150}, "samples_per_item": {"id/accuracy": 1.0}},
    ...            {"n": {"id/accuracy": 300, "ood/accuracy": 30}, "samples_per_item": {"id/accuracy": 1.0}}])["per_eval"]
    285
    """
    ids = [e for e in evals if "id/accuracy" in e.get("n", {})]
    items = max(1, round(sum(e["n"]["id/accuracy"] for e in ids) / len(ids))) if ids else ID_SIZE
    samples = max(1, round(sum((e.get("samples_per_item") or {}).get("id/accuracy", ID_SAMPLES) for e in ids)
                           / len(ids))) if ids else ID_SAMPLES
    return {"items": int(items), "samples": int(samples),
            "per_eval": int(round(items * samples + OOD_SIZE * OOD_SAMPLES / OOD_EVERY)),
            "overrides": [f"evaluation.suites.id.sample_size={items}", f"evaluation.suites.id.samples_per_item={samples}"]}


def fixed_interval(answers: int, steps: int, per_eval: int | None = None) -> int:
    """The longest interval whose whole-suite evaluations generate at least ``answers`` answers in ``steps``.

    >>> fixed_interval(5000, 200, per_eval=1440)   # 4 evaluations (5760 >= 5000): every 50 steps
    50
    >>> fixed_interval(2880, 200, per_eval=1440)   # 2 evaluations exactly: every 100 steps (was every 66: 3)
    100
    """
    per_eval = _full_eval_answers() if per_eval is None else per_eval
    return max(1, steps // max(1, -(-answers // per_eval)))


# --- the runs --------------------------------------------------------------------------------------------

class _Run:
    """One evaluator, fed step by step: its clock, its evaluate_fn, and what it decided."""

    def __init__(self, name: str, cfg, training: _Training, steps: int, run_dir: Path):
        from adaptive_eval.adaptive import AdaptiveEvaluator
        from adaptive_eval.asynchronous import InlineExecutor, SnapshotEval
        from adaptive_eval.tensorboard import make_logger

        self.name, self.cfg, self.run_dir = name, cfg, run_dir
        self.clock = SimClock()
        self.asynchronous = bool(cfg.evaluation.asynchronous)
        # Asynchronous: the evaluation runs on its own device (its own simulated clock) while training goes
        # on; it is computed at submission (InlineExecutor) and integrated ASYNC_LATENCY steps later.
        self.eval_clock = SimClock() if self.asynchronous else self.clock
        self.step_seconds = float(cfg.replay.step_seconds)
        self.evaluation = _Evaluation(training, self.eval_clock, cfg)
        # Asynchronous: evaluate a copy of the weights taken when the evaluation is submitted.
        self.evaluate_fn = SnapshotEval(training.model, self.evaluation) if self.asynchronous else self.evaluation
        self.evaluator = AdaptiveEvaluator.from_config(
            cfg, total_steps=steps, clock=self.clock,
            logger=make_logger(run_dir / "tb", flush_secs=cfg.logging.flush_secs),
            executor=InlineExecutor() if self.asynchronous else None,
            eval_clock=self.eval_clock if self.asynchronous else None)
        self.result = ReplayResult()
        self.evaluator.add_listener(self.result.listen)
        self.started = time.perf_counter()

    def step(self, global_step: int, streams: dict[str, float], keep: bool = False) -> None:
        self.clock.trace_time += self.step_seconds
        self.evaluator.observe(streams, global_step)
        self.evaluator.evaluate(self.evaluate_fn, 0, global_step, global_step)
        if keep and global_step % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1:  # (after the step, as a trainer saves)
            self.evaluator.checkpoint_saved(global_step, global_step)

    def close(self, steps: int) -> ReplayResult:
        self.evaluator.close()   # asynchronous: drains the evaluations still in flight
        s = self.evaluator.summary()
        self.result.summary = {
            "steps": steps, "evals": s["evals"], "lookbacks": s["lookbacks"],
            "samples": sum(e["sample_size"] or 0 for e in self.result.evals),
            "answers": sum(self.evaluation.generated.values()), "eval_seconds": self.eval_clock.eval_time,
            "train_seconds": self.clock.trace_time, "alarms": s["alarms"], "deferrals": s["deferrals"],
            "eval_errors": s["eval_errors"], "cancelled": s["cancelled"],
            "wall_seconds": round(time.perf_counter() - self.started, 3)}
        write_outputs(self.result, self.run_dir)
        return self.result


TRUTH_EVERY = 4   # steps between exact true values in the trace (carried forward between rows)


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _figures(result: ReplayResult, run: _Run, training: _Training, truth: dict[int, dict], *, fault: str,
             fault_step: int) -> dict:
    evals = result.evals
    measured = [e for e in evals if _finite(e["metrics"].get(METRIC))]
    # (an asynchronous run's: to the step its result came back, integrated_step)
    delay = None if fault == "none" else confirmed_delay(measured, fault_step, METRIC, direction="down")
    pick = pick_best(measured, METRIC)  # shrunk estimates: the luckiest small evaluation does not win
    last = measured[-1] if measured else None
    peak_step = max(truth, key=lambda s: truth[s][METRIC])
    return {
        "evals": len(evals),
        "answers": sum(run.evaluation.generated.values()),
        "problems": int(sum(e["sample_size"] or 0 for e in evals)),
        "alarms": len(result.alarms),
        "deferrals": len(result.deferrals),
        "fault_confirmed_after": delay,
        "best_step": pick.step if pick else None,
        "best": pick.eval["metrics"][METRIC] if pick else None,
        "best_estimate": pick.estimate if pick else None,
        "best_interval": list(pick.interval) if pick else None,
        "best_sample_size": pick.to_dict()["sample_size"] if pick else None,  # (its suite's problems)
        "best_true": training.truth_at(pick.step)[METRIC] if pick else None,
        "final_step": last["step"] if last else None,
        "final": last["metrics"][METRIC] if last else None,
        "peak_true": truth[peak_step][METRIC],
        "peak_step": peak_step,
        "train_seconds": run.clock.trace_time,
        "eval_seconds": run.eval_clock.eval_time,
        "asynchronous": run.asynchronous,
        "wall_seconds_simulated": run.clock(),
    }


def run_demo(out_dir: str | os.PathLike = "runs/demo", *, steps: int = DEFAULT_STEPS, seed: int = 0,
             config: str | None = None, overrides: Sequence[str] = (), fault: str = DEFAULT_FAULT,
             fault_step: int | None = None, progress: bool = True, plot: bool = True) -> dict:
    """Train the policy once with GRPO (the fault at ``fault_step``, default the middle step) and evaluate it
    four ways: adaptively while it trains (``adaptive``), the same preset asynchronously (``async``), and
    on fixed schedules at the adaptive run's cost in generated answers (from the kept weights): the whole
    suites (``fixed``) and the adaptive run's per-evaluation size (``fixed_same``); write the runs, return
    the comparison.

    ``config``/``overrides`` choose the adaptive runs' preset (default: ``default``).  Raises
    :class:`~adaptive_eval.demos.DemoError` before any training for an unknown ``fault``, too few
    ``steps`` to place the fault, or an ``out_dir`` that cannot be written.
    """
    if fault not in FAULTS:
        raise DemoError(f"--fault {fault!r}: unknown; the rlvr task knows {', '.join(FAULTS)}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < MIN_STEPS:
        raise DemoError(f"--steps {steps!r}: too few to place the fault; the rlvr task needs at least "
                        f"{MIN_STEPS} (the fault comes at the middle step, with 10 steps before and after)")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise DemoError(f"--seed must be an integer, got {seed!r}")
    if fault_step is None:
        fault_step = steps // 2
    if not 10 <= fault_step <= steps - 10:
        raise DemoError(f"fault_step must lie within [10, {steps - 10}] for {steps} steps, got {fault_step}")
    adaptive_cfg = as_config(load_config(config, [*_overrides(adaptive=True), *overrides]))
    async_cfg = as_config(load_config(config, [*_overrides(adaptive=True), *overrides, "evaluation.asynchronous=true",
                                               f"evaluation.async_integrate_after_steps={ASYNC_LATENCY}"]))
    missing = [name for name in SUITES if name not in adaptive_cfg.evaluation.suites]
    if missing:
        raise DemoError(f"evaluation.suites must keep the demo's suites {', '.join(SUITES)}")
    if adaptive_cfg.evaluation.metric != METRIC:
        # (the policies followed it, and the table, summary.json and picks went on reporting id/accuracy, unsaid; a
        # probe)
        print(f"note: evaluation.metric={adaptive_cfg.evaluation.metric} steers the adaptive runs' policies; the "
              f"comparison, summary.json and the picks report {METRIC}, which every run measures", file=sys.stderr)
    freq = adaptive_cfg.trigger.freq_steps
    if freq and freq - 1 >= fault_step:
        # (--steps 40: the adaptive runs' first evaluation came at step 24, after the fault at 20, with nothing from
        # before it to confirm against or look back to, and they "never" confirmed it; a probe)
        # (--steps 60 --config areal: "step 99" of a 60-step run, whose adaptive runs then never evaluated; a probe)
        when = (f"step {freq - 1}) comes after the fault at step {fault_step}" if freq - 1 < steps else
                f"step {freq - 1}) lies beyond the run's last step, {steps - 1}"
                + ("" if adaptive_cfg.trigger.eval_at_end else
                   " (and trigger.eval_at_end is false: they may not evaluate at all)"))
        print(f"note: --steps {steps}: the adaptive runs' first scheduled evaluation (trigger.freq_steps={freq}: "
              f"{when}, so there is none from before the fault to confirm the fall against; for a run this short "
              f"pass --set trigger.freq_steps={max(1, fault_step // 3)}", file=sys.stderr)
    out = Path(out_dir)
    prepare_out(out, RUNS)

    import torch
    from tqdm import tqdm

    from adaptive_eval.trace import TraceRecorder

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is fastest, and the arithmetic is reproducible
    started = time.perf_counter()
    streams: list[dict[str, float]] = []
    truth: dict[int, dict] = {}
    try:
        with torch.random.fork_rng(devices=[]):
            training = _Training(seed, fault, fault_step)
            runs = {"adaptive": _Run("adaptive", adaptive_cfg, training, steps, out / "adaptive"),
                    "async": _Run("async", async_cfg, training, steps, out / "async")}
            recorder = TraceRecorder(out / TRACE_NAME)
            bar = tqdm(total=steps, desc="GRPO", unit="step", disable=not progress, file=sys.stderr,
                       mininterval=0.25)
            try:
                for global_step in range(steps):
                    metrics = training.step(global_step)
                    streams.append(metrics)
                    row = dict(metrics)
                    if global_step % TRUTH_EVERY == 0 or global_step == steps - 1:
                        truth[global_step] = training.true_values()
                        row.update({f"eval/{name}/accuracy": truth[global_step][f"{name}/accuracy"]
                                    for name in SUITES})
                    recorder.record(global_step, row)
                    for name, run in runs.items():  # (asynchronous evaluation does not look back)
                        run.step(global_step, metrics, keep=name == "adaptive")
                    bar.update(1)
            finally:
                bar.close()
                recorder.close()
            train_wall = time.perf_counter() - started
            _write_events(out / TRACE_NAME, fault, fault_step)
            results = {name: run.close(steps) for name, run in runs.items()}
            interval = fixed_interval(results["adaptive"].summary["answers"], steps)
            fixed_cfg = as_config(load_config("areal", [*_overrides(adaptive=False), f"trigger.freq_steps={interval}"]))
            runs["fixed"] = _Run("fixed", fixed_cfg, training, steps, out / "fixed")
            for global_step, metrics in enumerate(streams):   # the same models, from their kept weights
                runs["fixed"].step(global_step, metrics)
            results["fixed"] = runs["fixed"].close(steps)
            # The fixed schedule at the adaptive run's per-evaluation size (its mean id problems and answers per
            # problem, ood as the adaptive runs do it) and its cost: evaluating less each time, more often.
            same = same_size(results["adaptive"].evals)
            same_interval = fixed_interval(results["adaptive"].summary["answers"], steps, per_eval=same["per_eval"])
            same_cfg = as_config(load_config("areal", [*_overrides(adaptive=True), *same["overrides"],
                                                       f"trigger.freq_steps={same_interval}"]))
            runs["fixed_same"] = _Run("fixed_same", same_cfg, training, steps, out / "fixed_same")
            for global_step, metrics in enumerate(streams):
                runs["fixed_same"].step(global_step, metrics)
            results["fixed_same"] = runs["fixed_same"].close(steps)
            report = {"task": "rlvr", "steps": steps, "seed": seed, "fault": fault, "fault_step": fault_step,
                      "fault_text": FAULTS[fault], "metric": METRIC,
                      "suites": {name: {"problems": size, "samples_per_item": k} for name, (size, k) in SUITES.items()},
                      "pass_k": PASS_K, "adaptive_config": config or "default",
                      "adaptive_overrides": list(overrides), "fixed_freq_steps": interval,
                      "fixed_same_freq_steps": same_interval,
                      "fixed_same_size": {"id_problems": same["items"], "id_samples_per_item": same["samples"]},
                      "async_latency_steps": ASYNC_LATENCY, "out": str(out),
                      "base_seconds": round(training.base_seconds, 3), "train_wall_seconds": round(train_wall, 3),
                      "costs": {k: float(adaptive_cfg.replay[k]) for k in
                                ("step_seconds", "eval_fixed_seconds", "eval_seconds_per_sample")}}
            for name, run in runs.items():
                report[name] = f = _figures(results[name], run, training, truth, fault=fault, fault_step=fault_step)
                # The picked checkpoint in the run's own summary.json: step, estimate, its 95% interval, the
                # measured mean and, because the demo knows it, the checkpoint's exact accuracy.
                results[name].summary["best"] = None if f["best_step"] is None else {
                    "metric": METRIC, "step": f["best_step"], "estimate": f["best_estimate"],
                    "interval": f["best_interval"], "measured": f["best"], "sample_size": f["best_sample_size"],
                    "true": f["best_true"], "by": "shrunk"}
                # (beside comparison.json's real wall_seconds, unlabelled; a probe)
                results[name].summary["simulated"] = ("train_seconds and eval_seconds on the simulated clock (costs "
                                                      "in comparison.json); the evaluations are the models' answers; "
                                                      "wall_seconds is this machine's real time (it varies run to "
                                                      "run; a probe)")
                write_outputs(results[name], out / name)
    finally:
        torch.set_num_threads(threads)
    if plot:
        from adaptive_eval.plot import plot_run

        for name in runs:
            report[name]["png"] = str(plot_run(out / name))
        report["comparison_png"] = str(_plot_comparison(out, report, results, truth, streams))
    report["wall_seconds"] = round(time.perf_counter() - started, 3)
    (out / "comparison.json").write_text(json.dumps(_strict(report), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return report


def _write_events(trace: Path, fault: str, fault_step: int) -> Path:
    """``trace.csv.events.yaml`` beside the trace: the fault as the change a schedule must confirm, read by
    ``adaptive-eval check`` and :mod:`adaptive_eval.testing` (``tune`` takes ``--events TRACE=STEP``)."""
    path = trace.with_name(trace.name + ".events.yaml")
    falls = fault in ("reward_hack", "lr_blowup")   # entropy_collapse does not lower the accuracy here
    body = (f"events:\n- {{step: {fault_step}, direction: down, metric: {METRIC}}}   # {FAULTS[fault]}\n"
            if falls else f"events: []   # {FAULTS[fault]}: no fall in {METRIC} to confirm\n")
    path.write_text(body, encoding="utf-8")
    return path


def _plot_comparison(out: Path, report: dict, results: dict, truth: dict, streams: list) -> Path:
    """``comparison.png``: each run's evaluations (95% intervals) over the true curves, and the reward."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.5, 8.0), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(3, 1, sharex=True, height_ratios=[3, 2, 2])
    grid = sorted(truth)
    colours = {"adaptive": "tab:blue", "async": "tab:purple", "fixed_same": "tab:brown", "fixed": "tab:orange"}
    labels = _labels(report)
    for ax, suite in zip(axes[:2], SUITES):
        metric = f"{suite}/accuracy"
        size, k = SUITES[suite]
        ax.plot(grid, [truth[s][metric] for s in grid], color="black", lw=1.2, label="exact accuracy")
        for i, (name, result) in enumerate(results.items()):
            pts = [e for e in result.evals if _finite(e["metrics"].get(metric))]
            if not pts:
                continue
            x = np.array([e["step"] for e in pts], dtype=float) + (i - 1.5) * 0.6
            y = np.array([e["metrics"][metric] for e in pts])
            ci = np.array([e["ci"][metric] for e in pts], dtype=float)
            ax.errorbar(x, y, yerr=[y - ci[:, 0], ci[:, 1] - y], fmt="o", ms=3.5, lw=1, capsize=0,
                        color=colours[name], label=f"{labels[name]}: {report[name]['evals']} evals, "
                        f"{report[name]['answers']} answers")
        ax.set_ylabel(f"{suite} accuracy")
        ax.set_ylim(-0.02, 1.02)
        # (mean@{k} it read, where the adaptive runs' id evaluations mostly drew 1 answer a problem; a probe)
        ax.set_title(f"{suite}: {size} problems x up to {k} answers; points: measured accuracy (mean@m, m the "
                     "answers drawn) with 95% intervals, line: exact", fontsize=9, loc="left")
    steps = np.arange(len(streams))
    reward = np.array([m["train/reward"] for m in streams])
    window = max(1, len(streams) // 40)
    cumulative = np.concatenate([[0.0], np.cumsum(reward)])
    lows = np.maximum(steps + 1 - window, 0)
    smooth = (cumulative[steps + 1] - cumulative[lows]) / (steps + 1 - lows)   # trailing mean, no edge dip
    axes[2].plot(steps, reward, color="tab:green", alpha=0.3, lw=0.8)
    axes[2].plot(steps, smooth, color="tab:green", lw=1.5, label="train/reward (the cheap stream)")
    axes[2].set_ylabel("train reward")
    axes[2].set_xlabel("GRPO step")
    if report["fault"] != "none":
        for ax in axes:
            ax.axvline(report["fault_step"], color="red", ls="--", lw=1)
    axes[0].legend(fontsize=7.5, loc="lower left")  # (lower right covered the evaluations after a fault; a probe)
    axes[2].legend(fontsize=7.5, loc="lower right")
    fig.suptitle(f"rlvr demo: {_fault_words(report)}" + (" (red line)" if report["fault"] != "none" else ""),
                 fontsize=10)
    path = out / "comparison.png"
    fig.savefig(path, dpi=100)
    return path


def _delay(d: dict, fault: str) -> str:
    if fault == "none":
        return "-"
    if d["fault_confirmed_after"] is None:
        return "never"
    return f"{d['fault_confirmed_after']} step" + ("" if d["fault_confirmed_after"] == 1 else "s")


def _best(d: dict) -> str:
    if d["best"] is None:
        return "-"
    return f"step {d['best_step']} ({d['best_true']:.3f})"


def _final(d: dict) -> str:
    return "-" if d["final"] is None else f"{d['final']:.3f} at step {d['final_step']}"


def _wall(d: dict) -> str:
    if d["asynchronous"]:
        return f"{d['wall_seconds_simulated'] / 3600:.2f} h (+{d['eval_seconds'] / 3600:.2f} h evaluating beside it)"
    return f"{d['wall_seconds_simulated'] / 3600:.2f} h ({d['eval_seconds'] / 3600:.2f} h of it evaluating)"


def _replay_command(report: dict, out) -> str:
    """The command that replays the adaptive run from the trace: the preset and ``--set`` it ran with, the demo's
    eval settings among them (it gave the suites' sizes alone: the user's preset and the answers per problem, ood's
    cadence and the simulated costs were left out, and its replay spent 1,515 items where the run spent 2,750; a
    fresh-clone probe).  The trace holds the suites' exact means, not each problem's: replay says so."""
    import shlex

    args = ["adaptive-eval", "replay", f"{out}/{TRACE_NAME}"]
    if report.get("adaptive_config", "default") != "default":
        args += ["--config", str(report["adaptive_config"])]
    for override in [*_overrides(adaptive=True), *report.get("adaptive_overrides", ())]:
        args += ["--set", override]
    return " ".join(shlex.quote(a) for a in args)


def _fault_words(report: dict) -> str:
    if report["fault"] == "none":
        return "no fault"
    return f"fault at step {report['fault_step']}: {report['fault_text']}"


def _labels(report: dict) -> dict[str, str]:
    n = len(report.get("adaptive_overrides", ()))
    changed = f" + {n} override{'s' if n != 1 else ''}" if n else ""  # (--set: it is not the preset as shipped)
    return {"adaptive": f"adaptive ({report['adaptive_config']} preset{changed})",
            "async": f"asynchronous (+{report['async_latency_steps']} steps)",
            "fixed_same": (f"fixed, same size ({report['fixed_same_size']['id_problems']} x "
                           f"{report['fixed_same_size']['id_samples_per_item']}, every {report['fixed_same_freq_steps']} "
                           "steps)"),
            "fixed": f"fixed (areal, every {report['fixed_freq_steps']} steps)"}


def format_comparison(report: dict) -> str:
    """The comparison table ``adaptive-eval demo --task rlvr`` prints."""
    names = [n for n in RUNS if n in report]
    runs = [report[n] for n in names]
    fault = report["fault"]
    rows = [("", *(_labels(report)[n] for n in names)),
            ("evaluations", *(str(d["evals"]) for d in runs)),
            ("generated answers", *(str(d["answers"]) for d in runs)),
            ("alarms", *(str(d["alarms"]) for d in runs)),
            ("fault confirmed after", *(_delay(d, fault) for d in runs)),
            ("checkpoint picked (true)", *(_best(d) for d in runs)),
            ("last eval", *(_final(d) for d in runs)),
            ("training wall time (simulated)", *(_wall(d) for d in runs))]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    s = report["suites"]
    c = report["costs"]
    out = report["out"]
    lines = [f"GRPO on 1-3 digit addition, {report['steps']} steps; {_fault_words(report)}",
             f"eval suites: id ({s['id']['problems']} problems x {s['id']['samples_per_item']} answers), "
             f"ood ({s['ood']['problems']} 4-digit problems x {s['ood']['samples_per_item']} answers); "
             f"tracked: {report['metric']} (mean@k, 95% intervals over problems)", ""]
    lines += ["  " + "  ".join(f"{cell:<{w}}" for cell, w in zip(r, widths)).rstrip() for r in rows]
    a = report["adaptive"]
    lines += ["",
              f"confirmed: steps from the fault to the first evaluation whose difference in {report['metric']} from "
              "the last evaluation before it lies below 0 at 95% (both intervals' margins, MOVER), or whose paired "
              "difference on the problems it shares with the previous evaluation does (scoring.confirmed_delay; "
              "asynchronous: to when its result came back)",
              "picked: by shrunk estimate (adaptive_eval.scoring.pick_best); true: the exact mean@1 of that checkpoint "
              f"on all {s['id']['problems']} id problems (the run's peak: {a['peak_true']:.3f} at step {a['peak_step']})",
              f"simulated wall time: {c['step_seconds']:g} s a GRPO step, {c['eval_fixed_seconds']:g} s + "
              f"{c['eval_seconds_per_sample']:g} s per generated answer an evaluation (asynchronous: on its own device); "
              f"real: {report['train_wall_seconds']:.0f} s on the CPU, base model {report['base_seconds']:.0f} s of it",
              f"wrote {out}/{{{','.join(names)}}}/ (evals.jsonl, alarms.jsonl, summary.json, tb/, run.png), "
              f"{out}/comparison.png, {out}/comparison.json; the run as a trace: {out}/{TRACE_NAME} (its fault: "
              f"{out}/{TRACE_NAME}.events.yaml)",
              f"replay it: {_replay_command(report, out)}",
              f"look: tensorboard --logdir {out}, and open http://localhost:6006/?smoothing=0 (the dashboard, "
              "unsmoothed: http://localhost:6006/#custom_scalars&_smoothingWeight=0)"]
    return "\n".join(lines)
