"""Verification of rules by intervention: do the model's outputs change when a rule's features are moved out of
its intervals? The results (:mod:`~torch_amore.verify.verification`), the interventions and the engine."""

from torch_amore.verify.engine import VerifyArgs, verify
from torch_amore.verify.verification import RuleVerification, Verification, wilson_interval

__all__ = ["RuleVerification", "Verification", "VerifyArgs", "verify", "wilson_interval"]
