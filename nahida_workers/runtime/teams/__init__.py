"""Teams on the runtime side (DESIGN.md section 8).

:mod:`.ops` binds the team tools and ``TodoWrite`` to the session that runs
them (each write a commit point of ``runtime/commits/team.py``);
:mod:`.session` is what the effect interpreter asks of a team at a
candidate answer (the team view, parking); :mod:`.join` makes a named
``Task`` child a member of its parent's team in the spawn's transaction;
:mod:`.projection` is the read-only view ``nahida team show`` and the API
print.
"""
