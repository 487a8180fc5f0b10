"""tau2-bench domains (pure data: imported when ``envace_gym`` registers its suites)."""

#: Domains served by ``EnvACE-Tau2-v0`` (registered as suites ``tau2/<domain>``).
DOMAINS = ("airline", "retail", "telecom", "mock")


def check_domain(domain: str) -> str:
    """``domain`` if it is a tau2 domain we serve, else a one-line ``ValueError`` naming the known ones."""
    if domain not in DOMAINS:
        raise ValueError(f"unknown tau2 domain {domain!r}; known domains: {', '.join(DOMAINS)}")
    return domain
