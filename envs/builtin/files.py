"""Builtin domain "files": an in-memory file system with users' home folders, text files and folders."""

from __future__ import annotations

import fnmatch
import posixpath
import random
from collections.abc import Sequence
from typing import Any

from envace_gym.backends import PythonBackend, Toolkit, tool
from envace_gym.tasks import Task

from ._common import ReferenceRecorder, generate_tasks, pick_template

DOMAIN = "files"
BACKEND = f"builtin/{DOMAIN}"
SYSTEM = (
    "You are a file-system assistant: use the tools to inspect and change the user's files, where "
    "every path is absolute and each user's home folder is /home/<user>."
)

# Disjoint entity pools, so the test split only has users, names and words never seen in training.
_USERS = {
    "train": [
        "ana",
        "bruno",
        "carla",
        "diego",
        "elena",
        "farid",
        "greta",
        "hugo",
        "ines",
        "jonas",
        "kira",
        "luis",
        "mona",
        "nils",
        "olga",
        "pavel",
    ],
    "test": ["vera", "wim", "xenia", "yusuf", "zoe", "anouk", "bilal", "chiara"],
}
_FOLDERS = {
    "train": [
        "docs",
        "projects",
        "photos",
        "music",
        "work",
        "recipes",
        "taxes",
        "school",
        "archive",
        "backup",
        "reports",
        "garden",
    ],
    "test": ["papers", "drafts", "invoices", "travel", "vault", "letters", "attic", "clients"],
}
_STEMS = {
    "train": [
        "budget",
        "todo",
        "report",
        "letter",
        "plan",
        "recipe",
        "summary",
        "minutes",
        "roster",
        "schedule",
        "inventory",
        "contacts",
        "expenses",
        "goals",
        "playlist",
        "receipts",
        "timeline",
        "wishlist",
    ],
    "test": [
        "ledger",
        "memo",
        "agenda",
        "itinerary",
        "checklist",
        "journal",
        "quotes",
        "estimate",
        "manifest",
        "syllabus",
        "forecast",
        "payroll",
    ],
}
_WORDS = {
    "train": [
        "amber",
        "birch",
        "cobalt",
        "delta",
        "ember",
        "falcon",
        "garnet",
        "harbor",
        "indigo",
        "juniper",
        "kestrel",
        "lagoon",
        "meadow",
        "nectar",
        "orchid",
        "pepper",
        "quartz",
        "raven",
        "saffron",
        "timber",
        "umber",
        "velvet",
        "willow",
        "yarrow",
        "zephyr",
        "acorn",
        "breeze",
        "cedar",
        "dune",
        "fern",
    ],
    "test": [
        "glacier",
        "hazel",
        "iris",
        "jasper",
        "kelp",
        "lotus",
        "marble",
        "nutmeg",
        "onyx",
        "poppy",
        "quill",
        "russet",
        "sierra",
        "thistle",
        "tundra",
    ],
}
_EXTS = (".txt", ".md", ".csv", ".log")  # not entities: shared by both splits


def _norm(path: str) -> str:
    """The canonical form of an absolute path ("/home//ana/./docs/" -> "/home/ana/docs")."""
    path = path.strip()
    if not path.startswith("/"):
        raise ValueError(f"path must be absolute (start with '/'), got {path!r}")
    # normpath keeps a leading "//" (POSIX allows it to mean something else); we never do.
    return "/" + posixpath.normpath(path).lstrip("/")


class FilesToolkit(Toolkit):
    """An in-memory file system: ``state = {"files": {path: text}, "dirs": [path, ...]}``.

    Paths are absolute and normalised; ``dirs`` is kept sorted and always holds "/" and every file's
    parent folder, so the state has one canonical form whatever order the calls came in.
    """

    run_inline = True  # bounded, pure tools over in-memory state: no watchdog thread needed

    # ------------------------------------------------------------------ helpers
    @property
    def _files(self) -> dict[str, str]:
        return self.state["files"]

    def _is_dir(self, path: str) -> bool:
        return path in self.state["dirs"]

    def _kind(self, path: str) -> str:
        if path in self._files:
            return "file"
        if self._is_dir(path):
            return "folder"
        raise ValueError(f"no such file or folder: {path!r}")

    def _require_parent(self, path: str) -> None:
        parent = posixpath.dirname(path)
        if not self._is_dir(parent):
            raise ValueError(f"parent folder {parent!r} does not exist")

    def _set_dirs(self, dirs: list[str]) -> None:
        self.state["dirs"] = sorted(set(dirs))

    # ------------------------------------------------------------------ tools
    @tool
    def list_dir(self, path: str) -> dict:
        """List the files and subfolders directly inside a folder (names only, sorted).

        Args:
            path: Absolute path of the folder, e.g. "/home/sam/stuff".
        """
        p = _norm(path)
        if self._kind(p) != "folder":
            raise ValueError(f"{p!r} is a file, not a folder")
        folders = [posixpath.basename(d) for d in self.state["dirs"] if d != p and posixpath.dirname(d) == p]
        files = [posixpath.basename(f) for f in sorted(self._files) if posixpath.dirname(f) == p]
        return {"path": p, "folders": folders, "files": files}

    @tool
    def read_file(self, path: str) -> dict:
        """Read the whole text of a file.

        Args:
            path: Absolute path of the file, e.g. "/home/sam/stuff/notes.txt".
        """
        p = _norm(path)
        if self._kind(p) != "file":
            raise ValueError(f"{p!r} is a folder, not a file")
        return {"path": p, "content": self._files[p]}

    @tool
    def write_file(self, path: str, content: str) -> dict:
        """Create a file, or replace the whole text of an existing one. Its folder must already exist.

        Args:
            path: Absolute path of the file to write.
            content: The complete new text of the file.
        """
        p = _norm(path)
        if self._is_dir(p):
            raise ValueError(f"{p!r} is a folder, not a file")
        self._require_parent(p)
        created = p not in self._files
        self._files[p] = content
        return {"path": p, "size": len(content), "created": created}

    @tool
    def make_dir(self, path: str) -> dict:
        """Create one new, empty folder. Its parent folder must already exist.

        Args:
            path: Absolute path of the folder to create, e.g. "/home/sam/old".
        """
        p = _norm(path)
        if p in self._files or self._is_dir(p):
            raise ValueError(f"{p!r} already exists")
        self._require_parent(p)
        self._set_dirs([*self.state["dirs"], p])
        return {"path": p}

    @tool
    def move(self, src: str, dst: str) -> dict:
        """Move or rename a file or folder (with everything in it) to a new full path.

        Args:
            src: Absolute path of the file or folder to move.
            dst: The complete new absolute path, including the name, e.g. "/home/sam/old/notes.txt";
                nothing may exist there yet and its parent folder must exist.
        """
        s, d = _norm(src), _norm(dst)
        if s == "/":
            raise ValueError("the root folder cannot be moved")
        kind = self._kind(s)
        if d in self._files or self._is_dir(d):
            # The most likely slip is giving the target folder rather than the new full path.
            raise ValueError(f"{d!r} already exists; dst must be the full new path, including the name")
        self._require_parent(d)
        if kind == "file":
            self._files[d] = self._files.pop(s)
        else:
            if d.startswith(s + "/"):
                raise ValueError(f"cannot move folder {s!r} into itself")
            moved = lambda p: d + p[len(s) :] if p == s or p.startswith(s + "/") else p  # noqa: E731
            self.state["files"] = {moved(p): text for p, text in self._files.items()}
            self._set_dirs([moved(p) for p in self.state["dirs"]])
        return {"from": s, "to": d, "type": kind}

    @tool
    def delete(self, path: str) -> dict:
        """Delete a file, or an empty folder.

        Args:
            path: Absolute path of the file or folder to delete.
        """
        p = _norm(path)
        if p == "/":
            raise ValueError("the root folder cannot be deleted")
        kind = self._kind(p)
        if kind == "file":
            del self._files[p]
        else:
            inside = [q for q in [*self._files, *self.state["dirs"]] if q.startswith(p + "/")]
            if inside:
                raise ValueError(f"folder {p!r} is not empty ({len(inside)} entries inside)")
            self._set_dirs([q for q in self.state["dirs"] if q != p])
        return {"deleted": p, "type": kind}

    @tool
    def find(self, name: str) -> list[str]:
        """Search the whole file system for files and folders by name; returns their full paths, sorted.

        Args:
            name: The exact file or folder name, e.g. "data.csv" (case-insensitive; shell wildcards * and ?
                are allowed, e.g. "*.csv").
        """
        pattern = name.strip().lower()
        if not pattern or "/" in pattern:
            raise ValueError(f"give a file or folder name, not a path: {name!r}")
        candidates = [*self._files, *(d for d in self.state["dirs"] if d != "/")]
        return sorted(p for p in candidates if fnmatch.fnmatchcase(posixpath.basename(p).lower(), pattern))

    @tool
    def file_info(self, path: str) -> dict:
        """Details of a file (size in characters, number of lines) or a folder (how many entries it holds).

        Args:
            path: Absolute path of the file or folder.
        """
        p = _norm(path)
        if self._kind(p) == "file":
            text = self._files[p]
            return {"path": p, "type": "file", "size": len(text), "lines": text.count("\n") + 1 if text else 0}
        listing = self.list_dir(p)
        return {"path": p, "type": "folder", "files": len(listing["files"]), "folders": len(listing["folders"])}


def make_backend(**kwargs: Any) -> PythonBackend:
    """A real backend for this domain (kwargs go to `PythonBackend`, e.g. ``timeout``)."""
    return PythonBackend(FilesToolkit, **kwargs)


# ------------------------------------------------------------------------------ task generation
def _content(rng: random.Random, split: str, lines: int | None = None) -> str:
    """A few short lines of words and numbers, e.g. "harbor raven 42"."""
    n = lines if lines is not None else rng.randint(1, 3)
    return "\n".join(f"{' '.join(rng.sample(_WORDS[split], 2))} {rng.randint(2, 99)}" for _ in range(n))


def _world(rng: random.Random, split: str) -> tuple[dict[str, Any], list[str]]:
    """1-2 users, each with 2-3 folders of 1-3 files (and maybe a loose file). File names are unique
    across the world, so "the file called X" always names exactly one file."""
    users = rng.sample(_USERS[split], rng.choice([1, 2, 2]))
    names = [s + e for s in _STEMS[split] for e in _EXTS]
    rng.shuffle(names)
    dirs, files = ["/", "/home"], {}
    for u, user in enumerate(users):
        home = f"/home/{user}"
        dirs.append(home)
        for f, folder in enumerate(rng.sample(_FOLDERS[split], rng.randint(2, 3))):
            path = f"{home}/{folder}"
            dirs.append(path)
            # The first folder always holds 2+ files, for the tasks that need a fuller folder.
            for _ in range(rng.randint(2, 3) if u == f == 0 else rng.randint(1, 3)):
                files[f"{path}/{names.pop()}"] = _content(rng, split)
        if rng.random() < 0.4:
            files[f"{home}/{names.pop()}"] = _content(rng, split)
    return {"files": dict(sorted(files.items())), "dirs": sorted(dirs)}, users


def _folders(state: dict[str, Any]) -> list[str]:
    """The folders inside home folders ("/home/<user>/<folder>")."""
    return [d for d in state["dirs"] if d.count("/") == 3]


def _files_in(state: dict[str, Any], folder: str) -> list[str]:
    return [p for p in state["files"] if posixpath.dirname(p) == folder]


def _fresh_name(rng: random.Random, split: str, state: dict[str, Any], ext: str | None = None) -> str:
    """A file name from the split's pool that no file in the world has yet."""
    used = {posixpath.basename(p) for p in state["files"]}
    exts = [ext] if ext else list(_EXTS)
    return rng.choice([s + e for s in _STEMS[split] for e in exts if s + e not in used])


def _fresh_folder(rng: random.Random, split: str, state: dict[str, Any], home: str) -> str:
    used = set(state["dirs"])
    return f"{home}/{rng.choice([f for f in _FOLDERS[split] if f'{home}/{f}' not in used])}"


def _distinct_sizes(rng: random.Random, split: str, state: dict[str, Any], paths: list[str]) -> None:
    """Lengthen files until their sizes differ, so "the largest file" has a single answer."""
    while True:
        sizes = [len(state["files"][p]) for p in paths]
        dupes = [p for p, n in zip(paths, sizes, strict=True) if sizes.count(n) > 1]
        if not dupes:
            return
        state["files"][dupes[0]] += f" {rng.choice(_WORDS[split])}"


def _lines(content: str) -> list[str]:
    return content.split("\n")


def _quote(content: str) -> str:
    return " / ".join(_lines(content))


_T = {
    "read": {
        "train": ["What does {path} say?", "Show me the contents of {path}, please."],
        "test": ["Could you open {path} and tell me what's written in it?"],
    },
    "size": {
        "train": ["How many characters long is {path}?", "What's the size of {path} in characters?"],
        "test": ["Tell me how big the file {path} is, counted in characters."],
    },
    "list": {
        "train": ["What files are in {path}?", "List the contents of the folder {path}."],
        "test": ["Which files does the folder {path} contain?"],
    },
    "mkdir": {
        "train": ["Create a new folder {path}.", "Please make a folder at {path}."],
        "test": ["I need an empty folder at {path}; set it up for me."],
    },
    "write": {
        "train": [
            'Create the file {path} with the text "{content}".',
            'Write a new file {path} containing exactly: "{content}"',
        ],
        "test": ['Save "{content}" as a new file at {path}.'],
    },
    "delete": {
        "train": ["Delete {path}.", "Please remove the file {path}, I don't need it anymore."],
        "test": ["Get rid of {path} for me."],
    },
    "find_read": {
        "train": [
            "Find the file called {name} and tell me its first line.",
            "I'm {user}. Somewhere I have a file named {name} -- what's the first line in it?",
        ],
        "test": ["Locate {name} wherever it is and read me the opening line."],
    },
    "find_size": {
        "train": [
            "How many characters does the file {name} have? I don't remember where I saved it.",
            "Find {name} and tell me its size in characters.",
        ],
        "test": ["There's a file named {name} somewhere; how long is it, in characters?"],
    },
    "find_move": {
        "train": [
            "Move the file {name} into the folder {dest}.",
            "I'm {user}. Please put {name} in {dest}, keeping its name.",
        ],
        "test": ["Could you relocate {name} to {dest}? Its name should stay the same."],
    },
    "find_delete": {
        "train": ["Delete the file called {name}; I'm not sure which folder it is in.", "Find {name} and remove it."],
        "test": ["Track down {name} and get rid of it, please."],
    },
    "find_copy": {
        "train": [
            "Make a copy of {name} in {dest}, with the same name.",
            "I'm {user}. Copy the file {name} into the folder {dest}, keeping the name.",
        ],
        "test": ["Duplicate {name} into {dest} under the same file name, leaving the original in place."],
    },
    "read_two": {
        "train": ["What do {a} and {b} say?", "Show me both {a} and {b}."],
        "test": ["Read {a} as well as {b} for me."],
    },
    "size_two": {
        "train": ["How many characters are in {a} and in {b}?", "Give me the sizes of {a} and {b}, in characters."],
        "test": ["Compare the character counts of {a} versus {b}."],
    },
    "mkdir_two": {
        "train": ["Create two new folders: {a} and {b}.", "Please make the folders {a} and {b}."],
        "test": ["Set up a pair of empty folders, {a} plus {b}."],
    },
    "followup_rename": {
        "train": ["Where is my file called {name}?", "I'm {user}. Can you find where {name} is stored?"],
        "test": ["In which folder did I put {name}? Give me its full path."],
    },
    "followup_rename_2": {
        "train": ["Thanks. Now rename it to {new}, in the same folder.", "Great, please rename that file to {new}."],
        "test": ["OK -- give it the new name {new}, keeping it where it is."],
    },
    "followup_read": {
        "train": [
            "I'm {user}. What files are in my {folder} folder?",
            "Hi, {user} here. Which files do I have in my {folder} folder?",
        ],
        "test": ["This is {user}: list what's inside my {folder} folder."],
    },
    "followup_read_2": {
        "train": ["And what does {name} say?", "Thanks. Now show me what's in {name}."],
        "test": ["Open {name} from that folder and read it to me."],
    },
    "no_tool": {
        "train": [
            "Heads-up for later, nothing to do yet: I'm going to save my essay as {path} tonight. "
            "Just read the path back to me.",
            "No files need to be touched right now. Please only repeat this path back to me: {path}",
        ],
        "test": ["Don't create or change anything for the moment; just confirm you noted the path {path}."],
    },
    "largest": {
        "train": [
            "Which file in {path} is the largest?",
            "What's the biggest file in the folder {path}, and how big is it?",
        ],
        "test": ["Among the files in {path}, which one has the most characters?"],
    },
    "move_all": {
        "train": [
            "Move every file in {src} into {dst}.",
            "Please move all the files from {src} to {dst}, keeping their names.",
        ],
        "test": ["Empty {src} by moving each of its files over to {dst}."],
    },
}

# (kind, category, weight): categories follow the guide's mix (single 20, multi-step 30, parallel 15,
# multi-turn 15, no-tool 10, other 10).
_KINDS = [
    ("read", "single", 4),
    ("size", "single", 4),
    ("list", "single", 4),
    ("mkdir", "single", 3),
    ("write", "single", 3),
    ("delete", "single", 2),
    ("find_read", "multi_step", 8),
    ("find_size", "multi_step", 5),
    ("find_move", "multi_step", 7),
    ("find_delete", "multi_step", 4),
    ("find_copy", "multi_step", 6),
    ("read_two", "parallel", 6),
    ("size_two", "parallel", 5),
    ("mkdir_two", "parallel", 4),
    ("followup_rename", "multi_turn", 8),
    ("followup_read", "multi_turn", 7),
    ("no_tool", "no_tool", 10),
    ("largest", "other", 5),
    ("move_all", "other", 5),
]
KIND_CATEGORY = {kind: category for kind, category, _ in _KINDS}

_READ_ONLY = ["call_match", "answer_match"]
_CHANGES = ["call_match", "state_match"]


def _make(kind: str, rng: random.Random, split: str, task_id: str) -> Task:
    state, users = _world(rng, split)
    files = sorted(state["files"])
    folders = _folders(state)
    # The target file of a one-file task; file names are unique, so its name alone identifies it.
    target = rng.choice(files)
    name = posixpath.basename(target)
    user = target.split("/")[2]  # the user who speaks owns the target file
    home = f"/home/{user}"
    other_folder = rng.choice([f for f in folders if f != posixpath.dirname(target)])
    t = lambda key, **kw: pick_template(rng, _T[key], split).format(**kw)  # noqa: E731
    reward = _READ_ONLY

    # Kinds that need a particular world shape adjust it before recording starts: the recorder's
    # backend copies the initial state when it is created.
    if kind == "largest":
        folder = rng.choice([f for f in folders if len(_files_in(state, f)) >= 2])
        _distinct_sizes(rng, split, state, _files_in(state, folder))

    rec = ReferenceRecorder(FilesToolkit, state, BACKEND)
    if kind == "read":
        (res,) = rec.step(("read_file", {"path": target}))
        rec.turn(f"{target} says:\n{res['content']}", _lines(res["content"]))
        turns = [t("read", path=target)]
    elif kind == "size":
        (res,) = rec.step(("file_info", {"path": target}))
        rec.turn(f"{target} is {res['size']} characters long ({res['lines']} lines).", [str(res["size"])])
        turns = [t("size", path=target)]
    elif kind == "list":
        folder = rng.choice(folders)
        (res,) = rec.step(("list_dir", {"path": folder}))
        rec.turn(f"{folder} holds: {', '.join(res['files'])}.", res["files"])
        turns = [t("list", path=folder)]
    elif kind == "mkdir":
        path = _fresh_folder(rng, split, state, home)
        rec.step(("make_dir", {"path": path}))
        rec.turn(f"Created the folder {path}.")
        turns, reward = [t("mkdir", path=path)], _CHANGES
    elif kind == "write":
        path = f"{rng.choice(folders)}/{_fresh_name(rng, split, state)}"
        content = _content(rng, split, lines=1)
        rec.step(("write_file", {"path": path, "content": content}))
        rec.turn(f"Created {path} ({len(content)} characters).")
        turns, reward = [t("write", path=path, content=content)], _CHANGES
    elif kind == "delete":
        rec.step(("delete", {"path": target}))
        rec.turn(f"Deleted {target}.")
        turns, reward = [t("delete", path=target)], _CHANGES
    elif kind == "find_read":
        ((path,),) = rec.step(("find", {"name": name}))
        (res,) = rec.step(("read_file", {"path": path}))
        first = _lines(res["content"])[0]
        rec.turn(f"{name} is at {path}; its first line is: {first}", [first])
        turns = [t("find_read", name=name, user=user)]
    elif kind == "find_size":
        ((path,),) = rec.step(("find", {"name": name}))
        (res,) = rec.step(("file_info", {"path": path}))
        rec.turn(f"{name} ({path}) is {res['size']} characters long.", [str(res["size"])])
        turns = [t("find_size", name=name)]
    elif kind == "find_move":
        ((path,),) = rec.step(("find", {"name": name}))
        rec.step(("move", {"src": path, "dst": f"{other_folder}/{name}"}))
        rec.turn(f"Moved {path} to {other_folder}/{name}.")
        turns, reward = [t("find_move", name=name, dest=other_folder, user=user)], _CHANGES
    elif kind == "find_delete":
        ((path,),) = rec.step(("find", {"name": name}))
        rec.step(("delete", {"path": path}))
        rec.turn(f"Deleted {path}.")
        turns, reward = [t("find_delete", name=name)], _CHANGES
    elif kind == "find_copy":
        ((path,),) = rec.step(("find", {"name": name}))
        (res,) = rec.step(("read_file", {"path": path}))
        rec.step(("write_file", {"path": f"{other_folder}/{name}", "content": res["content"]}))
        rec.turn(f"Copied {path} to {other_folder}/{name}.")
        turns, reward = [t("find_copy", name=name, dest=other_folder, user=user)], _CHANGES
    elif kind == "read_two":
        a, b = rng.sample(files, 2)
        ra, rb = rec.step(("read_file", {"path": a}), ("read_file", {"path": b}))
        rec.turn(
            f"{a}: {_quote(ra['content'])}\n{b}: {_quote(rb['content'])}", _lines(ra["content"]) + _lines(rb["content"])
        )
        turns = [t("read_two", a=a, b=b)]
    elif kind == "size_two":
        a, b = rng.sample(files, 2)
        ra, rb = rec.step(("file_info", {"path": a}), ("file_info", {"path": b}))
        rec.turn(f"{a} has {ra['size']} characters and {b} has {rb['size']}.", [str(ra["size"]), str(rb["size"])])
        turns = [t("size_two", a=a, b=b)]
    elif kind == "mkdir_two":
        a = _fresh_folder(rng, split, state, home)
        b = _fresh_folder(rng, split, {"dirs": [*state["dirs"], a]}, f"/home/{rng.choice(users)}")
        rec.step(("make_dir", {"path": a}), ("make_dir", {"path": b}))
        rec.turn(f"Created {a} and {b}.")
        turns, reward = [t("mkdir_two", a=a, b=b)], _CHANGES
    elif kind == "followup_rename":
        ((path,),) = rec.step(("find", {"name": name}))
        rec.turn(f"{name} is stored at {path}.", [path])
        new = f"{posixpath.dirname(path)}/{_fresh_name(rng, split, state, ext=posixpath.splitext(name)[1])}"
        rec.step(("move", {"src": path, "dst": new}))
        rec.turn(f"Renamed it: the file is now {new}.")
        turns = [t("followup_rename", name=name, user=user), t("followup_rename_2", new=posixpath.basename(new))]
        reward = ["call_match", "state_match", "answer_match"]
    elif kind == "followup_read":
        folder = rng.choice(folders)
        owner, folder_name = folder.split("/")[2], posixpath.basename(folder)
        (listing,) = rec.step(("list_dir", {"path": folder}))
        rec.turn(f"Your {folder_name} folder holds: {', '.join(listing['files'])}.", listing["files"])
        pick = rng.choice(listing["files"])
        (res,) = rec.step(("read_file", {"path": f"{folder}/{pick}"}))
        rec.turn(f"{pick} says:\n{res['content']}", _lines(res["content"]))
        turns = [t("followup_read", user=owner, folder=folder_name), t("followup_read_2", name=pick)]
    elif kind == "no_tool":
        path = f"/home/{user}/{rng.choice(_FOLDERS[split])}/{rng.choice(_STEMS[split])}{rng.choice(_EXTS)}"
        rec.turn(f"Noted: {path}. I haven't created or changed anything.", [path])
        turns = [t("no_tool", path=path)]
    elif kind == "largest":
        (listing,) = rec.step(("list_dir", {"path": folder}))
        infos = rec.step(*[("file_info", {"path": f"{folder}/{n}"}) for n in listing["files"]])
        best = max(infos, key=lambda r: r["size"])
        best_name = posixpath.basename(best["path"])
        rec.turn(
            f"The largest file in {folder} is {best_name}, with {best['size']} characters.",
            [best_name, str(best["size"])],
        )
        turns = [t("largest", path=folder)]
    elif kind == "move_all":
        src = rng.choice([f for f in folders if len(_files_in(state, f)) >= 2])
        dst = rng.choice([f for f in folders if f != src])
        (listing,) = rec.step(("list_dir", {"path": src}))
        rec.step(*[("move", {"src": f"{src}/{n}", "dst": f"{dst}/{n}"}) for n in listing["files"]])
        rec.turn(f"Moved {', '.join(listing['files'])} from {src} to {dst}.")
        turns, reward = [t("move_all", src=src, dst=dst)], _CHANGES
    else:  # pragma: no cover - _KINDS and this switch are kept in step
        raise ValueError(kind)
    return rec.build(
        id=task_id,
        domain=DOMAIN,
        split=split,
        user_turns=turns,
        reward=reward,
        system=SYSTEM,
        metadata={"kind": kind, "category": KIND_CATEGORY[kind]},
    )


def generate(split: str, count: int, exclude: Sequence[Task] = ()) -> list[Task]:
    """``count`` deterministic tasks of ``split`` (one of ``_common.SPLITS``), none overlapping ``exclude``
    (``_common.generate_tasks``); task ``i`` does not depend on ``count``."""
    return generate_tasks(DOMAIN, split, count, [k for k, _, _ in _KINDS], [w for _, _, w in _KINDS], _make, exclude)
