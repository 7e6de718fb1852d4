"""One exception root for everything ort-bundler reports to a user.

Each class carries the process exit code for its failure class, so `cli.main` can catch `BundleError` once and
exit with the documented code. docs/reference/exit-codes.md is generated from these classes: the first line of
each docstring is what its code means there.
"""

from __future__ import annotations


class BundleError(Exception):
    """A failure the user can act on; the message is one sentence naming what and where."""

    return_code = 1


class UsageError(BundleError):
    """A usage error: bad arguments (also: `sign` credentials that cannot be used)."""

    return_code = 2


class ManifestError(BundleError):
    """An invalid manifest or lock file."""

    return_code = 3

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class InputUnavailableError(BundleError):
    """An input is unavailable: not in the cache, not found, a network failure; a tool such as osslsigncode missing."""

    return_code = 4


class HashMismatchError(BundleError):
    """A hash mismatch: a file's bytes are not the ones its sha256 pins."""

    return_code = 5


class UnsafeArchiveError(BundleError):
    """An unsafe or unreadable archive."""

    return_code = 6


class BuildError(BundleError):
    """A build failure: an inspection or check failed."""

    return_code = 7


class VerificationError(BundleError):
    """A verification failure: a bundle altered, missing or extra files; a signature that does not verify or is not
    trusted."""

    return_code = 8


class UnsupportedError(BundleError):
    """Not supported: a capability ort-bundler does not have.

    Raised instead of pretending to succeed.
    """

    return_code = 9


# `ort-bundler apply` (and the applier every bundle ships, bundler/shipped/ort_bundle/delta_apply.py EXIT_CODES): one code
# per refusal, so a script can tell a wrong OLD from a delta damaged in transit.
class DeltaDamagedError(BundleError):
    """A delta refused by `apply` as damaged or truncated (its trailer, its records, its rebuilt zip's sha256)."""

    return_code = 20


class DeltaOversizeError(BundleError):
    """A delta refused by `apply` for declaring a size over the limits or over the free space."""

    return_code = 21


class DeltaOtherBundleError(BundleError):
    """A delta refused by `apply` because it is for another bundle than OLD."""

    return_code = 22


class DeltaWrongOldError(BundleError):
    """A delta refused by `apply` because OLD is not the zip it was made from."""

    return_code = 23


class DeltaOutsideOldError(BundleError):
    """A delta refused by `apply` because it copies bytes from outside OLD."""

    return_code = 24
