"""The dpcalc version, in a module of its own: modules that record it (the ledger, the trainer)
import it from here, never from the ``dpcalc`` package, whose type-checking imports reach every
layer."""

__version__ = "0.1.0"
