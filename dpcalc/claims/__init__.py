"""Published privacy claims and DP statements: ``dpcalc check`` (is a stated ε right for the stated
DP-SGD run?) and ``dpcalc report`` (the statement a model card needs).

Layer: above train, risk and planning (it reads what they produce), below the CLI. The
mathematics stays in the accountants, samplers and risk library; these modules compare and
describe their numbers.
"""

from __future__ import annotations

from dpcalc.claims.check import VERDICTS, ClaimCheck, check_claim, check_claims, exit_status
from dpcalc.claims.schema import (
           FIELDS,
           MAX_BYTES,
           MAX_CLAIMS,
           Claim,
           claim_from_mapping,
           load_claims,
           parse_claims,
)

__all__ = ["Claim", "ClaimCheck", "FIELDS", "MAX_BYTES", "MAX_CLAIMS", "VERDICTS", "check_claim", "check_claims",
           "claim_from_mapping", "exit_status", "load_claims", "parse_claims"]
