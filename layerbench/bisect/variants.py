"""The variants between good and bad, in order, and a build of each revision.

Git revisions: the good one, then each commit on the bad one's first-parent line after it
(`git rev-list --first-parent`). Each is cloned from the repository (`git clone --shared`: the
repository itself is only read) into the bisect's own directory under the scratch root,
checked out and built there with the plan's `build` command; a revision that does not build
is skipped, and says why. Named variants: the plan's list from good to bad."""

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from layerbench.bisect.spec import BisectPlan
from layerbench.core.errors import UserError
from layerbench.store.records import BisectVariant

BUILD_TIMEOUT_S = 3600.0
_GIT_TIMEOUT_S = 120.0


def _git(repo: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo), *arguments], capture_output=True, text=True, timeout=_GIT_TIMEOUT_S
    )


def repository(plan: BisectPlan) -> Path:
    """The plan's repository, relative to the plan file; refused with one line if it is none."""
    assert plan.spec.repo is not None
    path = Path(plan.source).parent / plan.spec.repo
    if not path.is_dir():
        raise UserError(f"{plan.source}: bisect.repo: {path} is not a directory")
    if _git(path, "rev-parse", "--git-dir").returncode != 0:
        raise UserError(f"{plan.source}: bisect.repo: {path} is not a git repository")
    return path


def _commit(repo: Path, option: str, revision: str) -> str:
    done = _git(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise UserError(f"{option} {revision}: not a revision of {repo}")
    return done.stdout.strip()


def revisions(plan: BisectPlan, good: str, bad: str) -> list[BisectVariant]:
    """good, then every commit after it up to bad on bad's first-parent line."""
    repo = repository(plan)
    good_commit, bad_commit = _commit(repo, "--good", good), _commit(repo, "--bad", bad)
    if good_commit == bad_commit:
        raise UserError(f"--good {good} and --bad {bad} are the same commit; nothing to bisect")
    if _git(repo, "merge-base", "--is-ancestor", good_commit, bad_commit).returncode != 0:
        if _git(repo, "merge-base", "--is-ancestor", bad_commit, good_commit).returncode == 0:
            raise UserError(f"--good {good} comes after --bad {bad}: swapped? good is the older one")
        raise UserError(f"--good {good} is not an ancestor of --bad {bad}")
    listed = _git(repo, "rev-list", "--reverse", "--first-parent", f"{good_commit}..{bad_commit}")
    commits = [good_commit, *listed.stdout.split()]
    parent = _git(repo, "rev-parse", f"{commits[1]}^").stdout.strip()
    if parent != good_commit:
        raise UserError(f"--good {good} is not on the first-parent line of --bad {bad}")
    subjects = _git(repo, "log", "--no-walk=unsorted", "--format=%s", *commits).stdout.splitlines()
    width = len(str(len(commits) - 1))
    return [
        BisectVariant(label=f"r{i:0{width}d}-{commit[:8]}", name=commit, title=subject[:120])
        for i, (commit, subject) in enumerate(zip(commits, subjects, strict=True))
    ]


def named(plan: BisectPlan, good: str, bad: str) -> list[BisectVariant]:
    """The plan's named variants from good to bad."""
    assert plan.spec.variants is not None
    names = [variant.name for variant in plan.spec.variants]
    for option, value in (("--good", good), ("--bad", bad)):
        if value not in names:
            raise UserError(
                f"{option} {value}: not a variant of {plan.source}; its variants: {', '.join(names)}"
            )
    first, last = names.index(good), names.index(bad)
    if first == last:
        raise UserError(f"--good and --bad are both {good}; nothing to bisect")
    if first > last:
        raise UserError(f"--good {good} comes after --bad {bad} in bisect.variants: swapped?")
    return [BisectVariant(label=name, name=name, build="ok") for name in names[first : last + 1]]


def resolve(plan: BisectPlan, good: str, bad: str) -> list[BisectVariant]:
    return revisions(plan, good, bad) if plan.spec.repo is not None else named(plan, good, bad)


@dataclass
class Builds:
    """Each revision checked out and built once, in a directory of its own under root."""

    plan: BisectPlan
    root: Path
    repo: Path | None = None
    made: dict[str, Path] = field(default_factory=dict)

    def checkout(self, variant: BisectVariant) -> Path | None:
        """The revision's built checkout (None for a named variant); variant.build says how
        it went: "ok", or why it did not build (then None)."""
        if self.plan.spec.repo is None:
            return None
        if variant.label in self.made:
            return self.made[variant.label]
        if variant.build not in (None, "ok"):
            return None  # it did not build before: it will not now
        self.repo = self.repo or repository(self.plan)
        where = self.root / variant.label
        log = self.root / f"{variant.label}.log"
        variant.build = self._build(where, log, variant.name)
        if variant.build != "ok":
            return None
        self.made[variant.label] = where
        return where

    def _build(self, where: Path, log: Path, commit: str) -> str:
        assert self.repo is not None
        steps = [
            (
                "git clone",
                ["git", "clone", "--quiet", "--shared", "--no-checkout", str(self.repo), str(where)],
            ),
            ("git checkout", ["git", "-C", str(where), "checkout", "--quiet", "--detach", commit]),
        ]
        if self.plan.spec.build:
            steps.append(("the build", ["sh", "-c", self.plan.spec.build]))
        with open(log, "w") as handle:
            for what, argv in steps:
                try:
                    done = subprocess.run(
                        argv,
                        cwd=where if what == "the build" else None,
                        stdin=subprocess.DEVNULL,
                        stdout=handle,
                        stderr=subprocess.STDOUT,
                        timeout=BUILD_TIMEOUT_S,
                    )
                except subprocess.TimeoutExpired:
                    return f"{what} took more than {BUILD_TIMEOUT_S:.0f} s"
                if done.returncode != 0:
                    said = log.read_text(errors="replace").strip().splitlines()
                    last = f": {said[-1][:200]}" if said else ""
                    return f"{what} exited with status {done.returncode}{last}"
        return "ok"
