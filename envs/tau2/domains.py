"""tau2-bench domains (pure data: imported when ``envace_gym`` registers its suites)."""

#: Domains served by ``EnvACE-Tau2-v0`` (registered as suites ``tau2/<domain>``).
DOMAINS = ("airline", "retail", "telecom", "mock")
