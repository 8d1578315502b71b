"""trcomp's training image: its names (uris), its build (build), its push (push).

``trcomp image uri|build|push`` (:mod:`trcomp.cli.image`) and ``make image``
call these modules; the estimators read the version table and URIs from
:mod:`trcomp.image.uris`. Docker itself is reached through :mod:`trcomp.docker_cli`.
"""

from __future__ import annotations

__all__: list[str] = []
