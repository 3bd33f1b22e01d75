"""Child sessions on the runtime side (DESIGN.md section 8).

:mod:`.spawn` derives stable child ids, writes spawn rows with the parent's
turn and builds the views and completion messages a parent adopts;
:mod:`.resume` posts a ``resume: CHILD_ID`` prompt and reopens the child;
:mod:`.worktree` makes and finishes the git worktree of an
``isolation: worktree`` child; :mod:`.close` is what a seal does for children
(the completion posted to the parent, each unfinished child's
``parent_close``); :mod:`.report` is what ``TaskOutput`` reports of a child.
"""
