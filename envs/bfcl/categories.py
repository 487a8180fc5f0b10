"""BFCL v4 test categories (pure data: imported when ``envace_gym`` registers its suites)."""

#: Categories served by ``EnvACE-BFCL-v0`` (registered as suites ``bfcl/<category>``).
CATEGORIES = (
    "simple_python",
    "simple_java",
    "simple_javascript",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_irrelevance",
    "live_relevance",
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)

#: Categories of BFCL v4 that cannot run here, and why.
UNSUPPORTED = {
    "web_search": "needs live web search (SerpAPI) over the network",
    "memory": "needs a sentence-embedding model from a hub for its memory backends",
    "format_sensitivity": "varies BFCL's prompt and output formats, which this env fixes (its own call format)",
}

#: The reward basis of every BFCL task: scored by BFCL's own checkers (``envs/bfcl/env.py::bfcl_basis``).
REWARD_BASIS = "bfcl"


def category_kind(category: str) -> str:
    """How a category is scored: ``ast``, ``irrelevance``, ``relevance`` or ``multi_turn``."""
    check_category(category)
    if category.startswith("multi_turn"):
        return "multi_turn"
    if "irrelevance" in category:
        return "irrelevance"
    if "relevance" in category:
        return "relevance"
    return "ast"


def check_category(category: str) -> str:
    """``category`` if it is served; otherwise a one-line error naming the served ones (or why it is not)."""
    if category in CATEGORIES:
        return category
    if category in UNSUPPORTED:
        raise ValueError(f"BFCL category {category!r} is not supported here: {UNSUPPORTED[category]}")
    raise ValueError(f"unknown BFCL category {category!r}; choose from {', '.join(CATEGORIES)}")
