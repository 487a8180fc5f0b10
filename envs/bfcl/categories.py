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
}
