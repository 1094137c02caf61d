"""Verification of rule sets by intervention: does the model's decision follow when their units are moved?"""

from torch_amore.verify.engine import VerifyArgs, verify
from torch_amore.verify.verification import RuleVerification, Verification, wilson_interval

__all__ = ["RuleVerification", "Verification", "VerifyArgs", "verify", "wilson_interval"]
