import dataclasses
import json

import pytest
import torch
from transformers import HfArgumentParser

from envace_gym.agents.demo import DemoConfig
from envace_gym.agents.train.sft import SFTConfig
from envace_gym.backends.spec import BackendSpec
from envace_gym.cli import COMMANDS, command_module, command_parser, main, parse
from envace_gym.cli.common import BackendArgs, ImportArgs, RunArgs, SamplingArgs, adjust_parser, flag_dests
from envace_gym.cli.sft import SFTArgs, SFTEnvArgs
from envace_gym.envs.builtin import SPLIT_SIZES
from envace_gym.suites import load_suite


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_eval_json_oracle_and_noop(capsys, tmp_path):
    code, out, _ = run(
        capsys,
        "eval",
        "--suite",
        "builtin/bank",
        "--policy",
        "oracle",
        "--episodes",
        "30",
        "--json",
        "--no-progress",
        "--out",
        str(tmp_path),
    )
    summary = json.loads(out)
    assert code == 0 and summary["success_rate"] == 1.0 and summary["episodes"] == 30
    assert summary["by_domain"]["bank"]["episodes"] == 30 and summary["mean_reward"] == 1.0
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 30 and json.loads(lines[0])["messages"][0]["role"] == "system"
    code, out, _ = run(
        capsys, "eval", "--suite", "builtin/bank", "--policy", "noop", "--episodes", "30", "--json", "--no-progress"
    )
    assert code == 0 and json.loads(out)["success_rate"] < 0.3


def test_eval_table_output(capsys):
    code, out, _ = run(
        capsys, "eval", "--suite", "builtin/bank", "--policy", "random", "--episodes", "5", "--no-progress"
    )
    assert code == 0 and "bank" in out and "success" in out


def test_list_json(capsys):
    code, out, _ = run(capsys, "list", "--json")
    data = json.loads(out)
    assert "EnvACE-ToolCall-v0" in data["envs"]
    bank = next(s for s in data["suites"] if s["suite"] == "builtin/bank")
    assert bank["splits"] == SPLIT_SIZES


def test_user_errors_are_one_line(capsys, tmp_path):
    for argv in (["eval", "--suite", "nope"], ["eval", "--env", "Nope-v0"], ["eval", "--policy", "genius"]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and err.count("\n") == 1 and err.startswith("envace: error:"), err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "user_turns": []}\n')
    code, _, err = run(capsys, "eval", "--suite", str(bad))
    assert code == 2 and "bad.jsonl:1: field 'user_turns'" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--suite", "bulitin"], "unknown suite 'bulitin'; did you mean 'builtin'? (`envace list` shows all;"),
        (["--suite", "builtin/bnak"], "unknown suite 'builtin/bnak'; did you mean 'builtin/bank'? ("),
        (["--suite", "tau2"], "unknown suite 'tau2'; did you mean 'tau2/airline', 'tau2/mock' or 'tau2/retail'?"),
        (["--suite", "bank"], "unknown suite 'bank'; did you mean 'builtin/bank'? (`envace list` shows all;"),
        (["--suite", "Travel"], "unknown suite 'Travel'; did you mean 'builtin/travel'? ("),
        (["--env", "EnvACE-ToolCal-v0"], "unknown env id 'EnvACE-ToolCal-v0'; did you mean 'EnvACE-ToolCall-v0'? ("),
        (["--env", "envace-bfcl-v0"], "unknown env id 'envace-bfcl-v0'; did you mean 'EnvACE-BFCL-v0'? ("),
        (["--backend", "rael"], "unknown backend 'rael'; did you mean 'real'? (use real, replay:PATH,"),
        (["--backend", "replya:x.jsonl"], "unknown backend 'replya:x.jsonl'; did you mean 'replay:x.jsonl'? ("),
        (["--backend", "self_inline"], "unknown backend 'self_inline'; did you mean 'self-inline'? ("),
        (["--policy", "oracel"], "unknown policy 'oracel'; did you mean 'oracle'? (use oracle | random"),
    ],
)
def test_a_misspelt_name_suggests_the_close_ones_in_one_line(capsys, argv, says):
    code, out, err = run(capsys, "eval", *argv, "--episodes", "1", "--no-progress")
    assert code == 2 and err.startswith(f"envace: error: {says}") and err.count("\n") == 1, err
    assert "bfcl/" not in err  # not the list of all 26 suites


def test_a_name_with_nothing_close_suggests_nothing():
    from envace_gym._registry import Registry, did_you_mean

    assert did_you_mean("genius", ["oracle", "random", "noop", "default", "tiny"]) == []
    with pytest.raises(KeyError, match=r"^\"unknown suite 'zzz' \(`envace list` shows all; or give a path"):
        load_suite("zzz")
    backends = Registry("backend")
    backends.register("builtin/bank", "x:y")
    backends.register("builtin/retail", "x:y")
    with pytest.raises(KeyError, match=r"unknown backend 'builtin/bnak'; did you mean 'builtin/bank'\? \(registered: "):
        backends.resolve("builtin/bnak")


def test_fidelity_json_fields_on_the_tiny_model(capsys, tmp_path):
    code, out, _ = run(
        capsys,
        "fidelity",
        "--policy",
        "tiny",
        "--suite",
        "builtin/bank",
        "--episodes",
        "2",
        "--json",
        "--no-progress",
        "--max-new-tokens",
        "16",
        "--out",
        str(tmp_path),
    )
    report = json.loads(out)
    assert code == 0 and set(report["backends"]) == {"self", "self-inline"}
    for name, mode in (("self", "prompted"), ("self-inline", "inline")):
        b = report["backends"][name]
        assert b["mode"] == mode and b["calls"] >= 2
        assert {
            "parse_valid_rate",
            "schema_valid_rate",
            "exact_match",
            "key_f1",
            "field_exact",
            "success_agreement",
        } <= set(b)
        assert len(b["calls_detail"]) == b["calls"]
    assert (tmp_path / "fidelity.json").exists() and (tmp_path / "fidelity.png").exists()
    code, _, err = run(capsys, "fidelity", "--policy", "tiny", "--backends", "dream")
    assert code == 2 and "--backends" in err


def test_eval_with_imagined_backends_reports_metrics(capsys):
    for backend in ("self", "self-inline"):
        code, out, _ = run(
            capsys,
            "eval",
            "--suite",
            "builtin/bank",
            "--policy",
            "tiny",
            "--backend",
            backend,
            "--episodes",
            "2",
            "--max-new-tokens",
            "8",
            "--max-turns",
            "2",
            "--json",
            "--no-progress",
        )
        summary = json.loads(out)
        assert code == 0 and summary["backend"] == backend and summary["episodes"] == 2 and "valid_call_rate" in summary
    code, _, err = run(capsys, "eval", "--suite", "builtin/bank", "--policy", "oracle", "--backend", "self-inline")
    assert code == 2 and "needs an LM policy" in err


# ------------------------------------------------------------------------ configs drive the flags
def fields_of(*dtypes):
    return {f.name for dtype in dtypes for f in dataclasses.fields(dtype)}


@pytest.mark.parametrize("command", ["list", "eval", "sft", "train", "fidelity", "demo"])
def test_every_flag_is_a_config_field_and_every_field_a_flag(command):
    parser = command_parser(command)
    dests = flag_dests(parser)
    configs = command_module(command).CONFIGS
    assert set(dests.values()) == fields_of(*configs)
    for action in parser._actions:
        assert action.dest == "help" or (action.help or "").strip(), f"--{action.dest} has no help text"
    for name in fields_of(*configs):  # both spellings: --max-new-tokens and --max_new_tokens
        assert dests[f"--{name}"] == name and dests[f"--{name.replace('_', '-')}"] == name


def test_sft_and_demo_flags_are_their_config_fields():
    sft_dests = set(flag_dests(command_parser("sft")).values())
    assert fields_of(SFTConfig) <= sft_dests  # every training-run setting is a flag...
    shared = fields_of(SFTEnvArgs, BackendArgs, SFTArgs, RunArgs, SamplingArgs, ImportArgs)
    assert sft_dests == fields_of(SFTConfig) | shared  # ...and nothing else than the shared and CLI-only ones
    assert fields_of(SFTArgs) == {"out", "policy", "roles"}
    assert set(flag_dests(command_parser("demo")).values()) == fields_of(DemoConfig)  # exactly DemoConfig


def test_flag_values_reach_the_configs_without_running():
    module, configs = parse(
        ["sft", "--out", "o", "--lr", "0.001", "--minutes", "2", "--seed", "7", "--lora", "--no-shared-head"]
    )
    env, backend, args, cfg, run_args, sampling, imports = configs
    assert module.__name__ == "envace_gym.cli.sft" and isinstance(cfg, SFTConfig)
    assert (cfg.lr, cfg.minutes, cfg.steps, cfg.lora, cfg.shared_head, cfg.bf16) == (
        0.001,
        2.0,
        None,
        True,
        False,
        "auto",
    )
    assert cfg.seed == run_args.seed == 7  # one --seed fills both dataclasses that have the field
    assert (args.out, args.policy, args.role_list, env.split, backend.backend) == (
        "o",
        "default",
        ["actor"],
        "train",
        "real",
    )
    assert cfg == SFTConfig(lr=0.001, minutes=2, seed=7, lora=True, shared_head=False)  # the rest: SFTConfig's defaults
    _, (_, _, args, cfg, _, _, _) = parse(
        ["sft", "--out", "o", "--steps", "3", "--bf16", "false", "--roles", "actor,env_role"]
    )
    assert (cfg.steps, cfg.bf16, args.role_list) == (3, False, ["actor", "env_role"])

    _, (demo,) = parse(["demo", "--episodes", "4", "--warm-steps", "5", "--batch-size", "2", "--out", "elsewhere"])
    assert demo == DemoConfig(episodes=4, warm_steps=5, batch_size=2, out_root="elsewhere")
    _, (demo,) = parse(["demo"])
    assert demo == DemoConfig() and demo.out_root == "runs"


def test_command_defaults_and_shared_flags():
    _, (env, backend, args, run_args, sampling, imports) = parse(["eval"])
    assert (env.env, env.split, env.max_turns, backend.backend, args.policy, args.episodes, args.batch_size) == (
        "EnvACE-ToolCall-v0",
        "test",
        None,
        "real",
        "oracle",
        None,
        8,
    )
    assert (run_args.seed, run_args.json, run_args.no_progress, sampling.max_new_tokens) == (0, False, False, 96)
    assert imports == ImportArgs(imports=[])
    _, (env, backend, args, run_args, sampling, _) = parse(
        [
            "eval",
            "--max-turns",
            "3",
            "--top-p",
            "0.5",
            "--max-new-tokens",
            "7",
            "--json",
            "--no-progress",
            "--backend",
            "replay:x.jsonl",
        ]
    )
    assert (env.max_turns, sampling.top_p, sampling.max_new_tokens, run_args.json, run_args.no_progress) == (
        3,
        0.5,
        7,
        True,
        True,
    )
    assert backend.spec == BackendSpec("replay", "x.jsonl")
    _, (_, _, _, run_args, _, _) = parse(["eval", "--json", "false"])
    assert run_args.json is False
    _, (env, args, run_args, sampling, _) = parse(["fidelity"])
    assert (args.policy, args.episodes, args.grounding, args.backend_list, sampling.max_new_tokens) == (
        "default",
        20,
        "reference",
        ["self", "self-inline"],
        160,
    )
    _, (_, args, _, _, _) = parse(["fidelity", "--simulator", "tiny", "--grounding", "none"])
    assert args.backend_list == ["self", "self-inline", "simulator"] and args.grounding == "none"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["eval", "--backend", "bogus"], "unknown backend 'bogus'"),
        (["eval", "--backend", "replay:"], "needs a target"),
        (["eval", "--episodes", "0"], "--episodes must be >= 1"),
        (["eval", "--top-p", "0"], "--top-p"),
        (["eval", "--max-turns", "0"], "--max-turns"),
        (["sft", "--out", "o", "--policy", "tiny"], "give steps or minutes"),
        (["sft", "--out", "o", "--steps", "0"], "--steps"),
        (["sft", "--out", "o", "--steps", "1", "--roles", "actor,critic"], "--roles"),
        (["sft", "--out", "o", "--steps", "1", "--bf16", "maybe"], "--bf16"),
        (["sft", "--out", "o", "--steps", "1", "--policy", "oracle"], "not a language model"),
        (["sft", "--out", "o", "--steps", "1", "--backend", "self"], "--backend must be real"),
        (["demo", "--episodes", "0"], "--episodes"),
        (["demo", "--warm-steps", "0"], "--warm-steps"),
        (["demo", "--warm", "later"], "--warm"),
        (["fidelity", "--backends", "self,real"], "--backends"),
        (["fidelity", "--episodes", "0"], "--episodes"),
    ],
)
def test_bad_values_exit_2_with_one_line(capsys, argv, says):
    code, out, err = run(capsys, *argv)
    assert code == 2 and err.startswith("envace: error:") and err.count("\n") == 1 and says in err, err
    assert out == ""


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["eval", "--bogus"], "unrecognized arguments: --bogus"),
        (["eval", "--episodes", "many"], "invalid int value"),
        (["fidelity", "--grounding", "some"], "invalid choice"),
        (["sft", "--steps", "2"], "required: --out"),
        (["train", "--steps", "2"], "required: --out"),
        (["trian"], "invalid choice"),
    ],
)
def test_bad_flags_exit_2_with_argparses_message(capsys, argv, says):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and says in capsys.readouterr().err


# ------------------------------------------------------------------------ --device
DEVICE_COMMANDS = [
    ["train", "--out", "o"],
    ["eval"],
    ["sft", "--out", "o", "--steps", "1"],
    ["demo"],
]


@pytest.mark.parametrize("argv", DEVICE_COMMANDS, ids=lambda argv: argv[0])
def test_device_flag_is_accepted_and_defaults_to_auto(argv):
    def device(configs):
        return next(c.device for c in configs if isinstance(c, RunArgs | DemoConfig))

    assert device(parse(argv)[1]) == "auto"
    assert device(parse([*argv, "--device", "cpu"])[1]) == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("argv", DEVICE_COMMANDS, ids=lambda argv: argv[0])
def test_device_cuda_without_a_gpu_is_a_one_line_error(capsys, argv):
    code, out, err = run(capsys, *argv, "--device", "cuda")
    assert code == 2 and err.startswith("envace: error:") and err.count("\n") == 1, err
    assert "--device cuda: no CUDA device is available" in err and "Traceback" not in err and out == ""
    code, _, err = run(capsys, *argv, "--device", "gpu")
    assert code == 2 and "--device must be auto, cpu, cuda or cuda:N, got 'gpu'" in err


def test_an_lm_eval_runs_on_the_device_it_is_given(capsys):
    code, out, _ = run(
        capsys, "eval", "--suite", "builtin/bank", "--policy", "tiny", "--episodes", "2", "--max-turns", "1",
        "--max-new-tokens", "4", "--device", "cpu", "--json", "--no-progress",
    )  # fmt: skip
    assert code == 0 and json.loads(out)["episodes"] == 2


def test_help_documents_every_config_field(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["sft", "--help"])
    text = capsys.readouterr().out
    assert exc.value.code == 0
    for f in dataclasses.fields(SFTConfig):
        assert f"--{f.name.replace('_', '-')}" in text and f.metadata["help"].split()[0] in text
    assert "(default: 5e-05)" in text and "--no-shared-head" in text


def test_a_field_in_two_dataclasses_needs_one_default():
    @dataclasses.dataclass
    class A:
        seed: int = dataclasses.field(default=0, metadata={"help": "a"})

    @dataclasses.dataclass
    class B:
        seed: int = dataclasses.field(default=1, metadata={"help": "b"})

    with pytest.raises(TypeError, match="seed"):
        adjust_parser(HfArgumentParser([A, B], conflict_handler="resolve"))


def test_eval_oracle_five_episodes(capsys):
    code, out, _ = run(capsys, "eval", "--policy", "oracle", "--suite", "builtin/bank", "--episodes", "5", "--json")
    summary = json.loads(out)
    assert code == 0 and summary["success_rate"] == 1.0 and summary["episodes"] == 5


def test_lm_eval_walks_the_suites_seeded_episode_order(capsys, tmp_path):
    argv = ["eval", "--suite", "builtin", "--policy", "tiny", "--episodes", "6", "--seed", "3"]
    argv += ["--max-new-tokens", "4", "--max-turns", "1", "--batch-size", "2", "--json", "--no-progress"]
    code, out, _ = run(capsys, *argv, "--out", str(tmp_path))
    assert code == 0 and json.loads(out)["episodes"] == 6
    ran = [json.loads(line)["task_id"] for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    expected = [t.id for t in load_suite("builtin").filter(split="test").episode_order(6, seed=3)]
    assert ran == expected and len({t.split("-")[0] for t in ran}) > 1  # seeded and balanced across domains


def test_train_flags_are_envace_config_fields_and_reach_it():
    from envace_gym.agents.train.config import EnvACEConfig
    from envace_gym.cli.train_cmd import TrainArgs, TrainEnvArgs

    dests = set(flag_dests(command_parser("train")).values())
    assert dests == fields_of(TrainEnvArgs, TrainArgs, EnvACEConfig, RunArgs, ImportArgs)
    argv = ["train", "--out", "o", "--backend", "simulator", "--simulator", "tiny", "--no-train-env-role"]
    argv += ["--steps", "7", "--group-size", "3", "--tasks-per-step", "5", "--lr", "1e-5", "--lora", "--seed", "4"]
    _, (env, args, cfg, run_args, _) = parse(argv)
    assert (cfg.backend, cfg.simulator, cfg.train_env_role, cfg.steps, cfg.group_size) == (
        "simulator",
        "tiny",
        False,
        7,
        3,
    )
    assert (cfg.tasks_per_step, cfg.lr, cfg.lora, cfg.seed, run_args.seed) == (5, 1e-5, True, 4, 4)
    assert env.split == "train" and args.out == "o" and not args.resume
    _, (_, _, cfg, _, _) = parse(["train", "--out", "o", "--real-fraction", "0.25"])
    assert cfg.backend == "self" and cfg.real_fraction == 0.25


def test_train_config_file_then_the_flags_main_was_given(tmp_path, monkeypatch):
    """``main(argv)`` from Python: the flags in ``argv`` (not ``sys.argv``) override ``--config``'s keys."""
    import envace_gym.agents.train.envace as envace
    from envace_gym.cli import train_cmd

    seen = {}

    class StopBeforeTraining(Exception):
        pass

    def trainer(policy, env_factory, cfg, out, **kwargs):
        seen["cfg"] = cfg
        raise StopBeforeTraining

    monkeypatch.setattr(train_cmd, "load_lm", lambda *args, **kwargs: None)
    monkeypatch.setattr(envace, "EnvACETrainer", trainer)
    monkeypatch.setattr("sys.argv", ["envace"])  # what pytest's own argv would otherwise be read as
    path = tmp_path / "run.toml"
    path.write_text('lr = 2e-5\nsteps = 3\nbackend = "real"\ntrain_env_role = false\n')
    argv = ["train", "--suite", "builtin/bank", "--out", str(tmp_path / "run"), "--config", str(path)]
    with pytest.raises(StopBeforeTraining):
        main([*argv, "--lr", "1e-5", "--backend", "self", "--train-env-role"])
    cfg = seen["cfg"]
    assert (cfg.lr, cfg.backend, cfg.train_env_role, cfg.steps) == (1e-5, "self", True, 3)
    _, (_, _, cfg, _, _) = parse(argv)  # the file alone: its keys over the dataclass defaults
    assert (cfg.lr, cfg.backend, cfg.train_env_role, cfg.steps, cfg.group_size) == (2e-5, "real", False, 3, 4)
    path.write_text("lr = 2e-5\nlearning_rate = 1.0\n")
    with pytest.raises(ValueError, match="learning_rate"):
        parse(argv)


def test_no_progress_hides_every_bar_and_quiet_every_line_but_the_result(capfd, tmp_path):
    from transformers.utils import logging as hf_logging

    from envace_gym.agents.lm.models import tiny_model
    from envace_gym.agents.train.checkpoint import save_checkpoint

    model, tok = tiny_model()
    newest = save_checkpoint(tmp_path / "run", 3, model, tok, None, None, "")
    argv = ["eval", "--policy", f"ckpt:{tmp_path / 'run'}", "--episodes", "1", "--max-new-tokens", "4",
            "--max-turns", "1"]  # fmt: skip
    said = f"envace: ckpt:{tmp_path / 'run'} -> {newest} (newest complete checkpoint)"
    capfd.readouterr()
    assert main(argv) == 0
    out, err = capfd.readouterr()
    assert said in err and "eval ckpt:" in err and "success" in out  # our bar and info line...
    assert "Loading weights" not in err  # ...never transformers' bars: our progress is the user's
    assert main([*argv, "--no-progress"]) == 0
    out, err = capfd.readouterr()
    assert err.strip() == said and "success" in out  # the bars gone, transformers' too; the info line stays
    assert main([*argv, "--quiet"]) == 0
    out, err = capfd.readouterr()
    assert err == "" and "success" in out and "calls per episode" in out  # the result only
    assert hf_logging.is_progress_bar_enabled()  # put back after the command


def test_quiet_hides_the_libraries_warnings_and_logs_but_not_ours_or_errors(caplog):
    import logging
    import warnings

    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    caplog.set_level(logging.INFO)
    with pytest.warns(UserWarning, match="torn last line") as caught:
        with RunArgs(quiet=True).output():
            assert not hf_logging.is_progress_bar_enabled()
            for module in ("transformers.modeling_utils", "peft.tuners", "torch.utils.checkpoint", "accelerate"):
                warnings.warn_explicit("is deprecated", FutureWarning, "x.py", 1, module=module)
            warnings.warn_explicit("torn last line", UserWarning, "jsonl.py", 1, module="envace_gym.jsonl")
            logging.getLogger("mcp.client.stdio").warning("Failed to parse JSONRPC message")
            logging.getLogger("mcp.client.stdio").error("the server died")
    assert [str(w.message) for w in caught] == ["torn last line"]
    assert [r.getMessage() for r in caplog.records] == ["the server died"]
    logging.getLogger("mcp.client.stdio").warning("after")  # put back
    assert caplog.records[-1].getMessage() == "after" and hf_logging.get_verbosity() == verbosity
    with RunArgs(no_progress=True).output():  # bars only
        assert not hf_logging.is_progress_bar_enabled()
        logging.getLogger("x").warning("still logged")
    assert caplog.records[-1].getMessage() == "still logged" and hf_logging.is_progress_bar_enabled()


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_flag_is_in_a_titled_help_group(command):
    """``--help`` lists each flag under a group that says what it is for: the untitled ``options:`` group
    holds ``--help`` alone."""
    parser = command_parser(command)
    untitled = [a.option_strings[0] for a in parser._optionals._group_actions if a.dest != "help"]
    assert untitled == [], f"envace {command} --help lists {untitled} under 'options:'"
