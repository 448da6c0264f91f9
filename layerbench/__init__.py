"""layerbench: what does this storage layer cost me, and why?"""

__version__ = "0.1.0"
