"""The builtin suites' four splits: sizes and ids, held-in splits (val, test-id) disjoint from train (and
test-id from val) in user texts and world ids, drawn from train's phrasings, and train and test unchanged."""

import hashlib
import importlib
import json
import re
import string

import pytest

import envace_gym
from envace_gym.envs.builtin import SPLIT_SIZES
from envace_gym.envs.builtin._common import SPLITS, world_ids
from envace_gym.suites import load_suite

DOMAINS = envace_gym.registration.BUILTIN_DOMAINS

# sha256 of json.dumps([t.to_dict() for t in <domain's train and test tasks>], sort_keys=True), computed at
# da9cfcc, the commit before val and test-id were added.
TRAIN_TEST_SHA256 = {
    "bank": "e1cf1feade65910925056d624234a8d97e1de2221cc6e3b5ed46c176560d3e94",
    "files": "b057a459f0371bb2931b1fbff46ac8222fd259ac02d5496200b5ad52794c5a9f",
    "retail": "7ab23624980fb71fc82cb35ac1b40d83c472177053a870da06b249427b4c10b7",
    "travel": "8e75333b39312fad5545df564e3970ad5e3a40f00d795979d57c06c1b1bb48d1",
}


def _by_split(domain):
    suite = load_suite(f"builtin/{domain}")
    return {split: list(suite.filter(split=split)) for split in suite.splits}


@pytest.mark.parametrize("domain", DOMAINS)
def test_train_and_test_are_unchanged(domain):
    """A change of these hashes means the train or test tasks changed (so do every figure measured on them):
    recompute them only on purpose."""
    tasks = [t.to_dict() for t in load_suite(f"builtin/{domain}") if t.split in ("train", "test")]
    digest = hashlib.sha256(json.dumps(tasks, sort_keys=True).encode()).hexdigest()
    assert digest == TRAIN_TEST_SHA256[domain]


@pytest.mark.parametrize("domain", DOMAINS)
def test_sizes_and_ids(domain):
    assert tuple(SPLIT_SIZES) == SPLITS
    by_split = _by_split(domain)
    assert {s: len(tasks) for s, tasks in by_split.items()} == SPLIT_SIZES
    for split, tasks in by_split.items():
        assert [t.id for t in tasks] == [f"{domain}-{split}-{i:04d}" for i in range(len(tasks))]
        assert {(t.split, t.domain) for t in tasks} == {(split, domain)}


def test_task_ids_are_unique_across_the_mix():
    mix = load_suite("builtin")
    assert len({t.id for t in mix}) == len(mix) == len(DOMAINS) * sum(SPLIT_SIZES.values())


@pytest.mark.parametrize("domain", DOMAINS)
def test_held_in_splits_share_no_user_text_or_world_id(domain):
    by_split = _by_split(domain)

    def texts(split):
        return {u for t in by_split[split] for u in t.user_turns}

    def ids(split):
        return set().union(*(world_ids(t) for t in by_split[split]))

    if domain != "files":  # files' worlds are paths, without numeric ids; the others must have some
        assert ids("train") and ids("val") and ids("test-id")
    for split, earlier in (("val", ["train"]), ("test-id", ["train", "val"])):
        for other in earlier:
            assert not texts(split) & texts(other), (split, other)
            assert not ids(split) & ids(other), (split, other)


def _matcher(templates):
    """A regex matching any of ``templates`` with each ``{field}`` filled by some text."""
    parts = [
        "".join(
            re.escape(text) + (".+" if name is not None else "") for text, name, _, _ in string.Formatter().parse(t)
        )
        for t in templates
    ]
    return re.compile("|".join(f"(?:{p})" for p in parts), re.DOTALL)


@pytest.mark.parametrize("domain", DOMAINS)
def test_held_in_splits_use_the_train_phrasings(domain):
    """Turn ``i`` of a task of kind ``k`` is phrased from ``_T[k]`` (``_T[f"{k}_{i + 1}"]`` for later turns):
    from its train templates in val and test-id, from its test ones in test."""
    templates = importlib.import_module(f"envace_gym.envs.builtin.{domain}")._T
    by_split = _by_split(domain)
    for split, pool in (("val", "train"), ("test-id", "train"), ("test", "test")):
        for task in by_split[split]:
            kind = task.metadata["kind"]
            for i, text in enumerate(task.user_turns):
                key = kind if i == 0 else f"{kind}_{i + 1}"
                assert _matcher(templates[key][pool]).fullmatch(text), (task.id, text)
