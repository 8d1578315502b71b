"""trcomp's tests. A regular package, so that ``tests.helpers`` is this checkout's.

A namespace package would lose to any installed top-level ``tests`` package (the
SageMaker SDK's dependency smdebug-rulesconfig installs one into site-packages).
"""
