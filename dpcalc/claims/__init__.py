"""Published privacy claims and DP statements: ``dpcalc check`` (is a stated ε right for the stated
DP-SGD run?) and ``dpcalc report`` (the statement a model card needs).

Layer: above train, risk and planning (it reads what they produce), below the CLI. The
mathematics stays in the accountants, samplers and risk library; these modules compare and
describe their numbers.
"""

from __future__ import annotations

from dpcalc.claims.schema import (
           FIELDS,
           MAX_BYTES,
           MAX_CLAIMS,
           Claim,
           claim_from_mapping,
           load_claims,
           parse_claims,
)

# The verdicts (``dpcalc.claims.check``: check_claim, check_claims, exit_status, ClaimCheck,
# VERDICTS) import the accountants; they are not re-exported here, so that the CLI's help and
# option parsing (which need only the schema) stay light.
__all__ = ["Claim", "FIELDS", "MAX_BYTES", "MAX_CLAIMS", "claim_from_mapping", "load_claims", "parse_claims"]
