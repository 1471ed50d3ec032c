"""The bug zoo (chapter 11): bugs injected into tfx's own parts beside their healthy twins, the
symptoms that give each away, and the healthy standard set-ups every diagnostic must stay quiet on.

May import: every layer below, up to tfx.learn.
"""

from tfx import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "bugs": [],
        "bugzoo": ["BUGS", "demo", "pair"],
        "healthy": ["HEALTHY", "check"],
    },
)
