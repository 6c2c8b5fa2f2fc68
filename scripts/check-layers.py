#!/usr/bin/env python3
"""scripts/check-layers.py — no include runs upward.

The rooms and the rooms each may use are written once, in CMakeLists.txt's weft_room(...) lines
(the libraries are linked by them); the test folders' in its weft_tests(...) lines. This script reads
both, then every #include "..." under src/, include/ and tests/<room>/, and fails naming each include
of a room that the including room does not use (directly or through the rooms it uses).

    check-layers.py [ROOT]     exit 0 when every include runs downward, 1 otherwise
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))


def read_cmake():
    text = open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8").read()
    rooms = {}  # library -> (folder, [libraries it uses])
    for m in re.finditer(r"^weft_room\((\w+)\s+(\S+)\s+USES([^)]*)\)", text, re.M):
        rooms[m.group(1)] = (m.group(2), m.group(3).split())
    tests = {}  # test folder -> [libraries]
    for m in re.finditer(r"^\s*weft_tests\((\w+)([^)]*)\)", text, re.M):
        tests[m.group(1)] = m.group(2).split()
    if not rooms:
        sys.exit("check-layers.py: no weft_room(...) lines in CMakeLists.txt")
    return rooms, tests


def closure(rooms, libs):
    seen, todo = set(), list(libs)
    while todo:
        lib = todo.pop()
        if lib in seen or lib not in rooms:
            continue
        seen.add(lib)
        todo.extend(rooms[lib][1])
    return seen


def room_of(rooms, rel):
    """The room (library) owning a path relative to src/ or include/weft/, by the longest folder
    that is a prefix of the path without its extension (include/weft/backends/cpu.h is backends/cpu's)."""
    stem = os.path.splitext(rel)[0].split("/")
    best, best_len = None, 0
    for lib, (folder, _) in rooms.items():
        parts = folder.split("/")
        if stem[: len(parts)] == parts and len(parts) > best_len:
            best, best_len = lib, len(parts)
    return best


def resolve(rooms, including, name):
    """The room an include names, or None for the standard library, outside packages and tools."""
    candidates = [(os.path.join(ROOT, "include", name), name[len("weft/"):] if name.startswith("weft/") else None),
                  (os.path.join(ROOT, "src", name), name),
                  (os.path.join(os.path.dirname(including), name), None)]
    for path, rel in candidates:
        if not os.path.isfile(path):
            continue
        if rel is None:
            rel_path = os.path.relpath(path, ROOT).replace(os.sep, "/")
            for prefix in ("src/", "include/weft/"):
                if rel_path.startswith(prefix):
                    rel = rel_path[len(prefix):]
            if rel is None:
                return None
        return room_of(rooms, rel)
    return None


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def main():
    rooms, tests = read_cmake()
    lib_name = lambda lib: rooms[lib][0]
    checked, problems = 0, []
    files = []
    for top, prefix in (("src", ""), ("include/weft", "")):
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            for n in names:
                if n.endswith((".h", ".cpp")):
                    path = os.path.join(dirpath, n)
                    rel = os.path.relpath(path, os.path.join(ROOT, top)).replace(os.sep, "/")
                    owner = room_of(rooms, rel)
                    if owner is None:
                        problems.append(f"{os.path.relpath(path, ROOT)}: in no room of CMakeLists.txt's weft_room lines")
                        continue
                    files.append((path, closure(rooms, [owner]), lib_name(owner)))
    for folder, libs in tests.items():
        for dirpath, _, names in os.walk(os.path.join(ROOT, "tests", folder)):
            for n in names:
                if n.endswith((".h", ".cpp")):
                    files.append((os.path.join(dirpath, n), closure(rooms, libs), "tests/" + folder))
    for path, allowed, who in files:
        text = open(path, encoding="utf-8", errors="replace").read()
        for m in INCLUDE.finditer(text):
            target = resolve(rooms, path, m.group(1))
            checked += 1
            if target is not None and target not in allowed:
                line = text.count("\n", 0, m.start()) + 1
                problems.append(f"{os.path.relpath(path, ROOT)}:{line}: {who} includes \"{m.group(1)}\" of "
                                f"{lib_name(target)}, which {who} does not use (CMakeLists.txt: weft_room/weft_tests)")
    for p in problems:
        print(p)
    print(f"check-layers: {len(files)} files, {checked} includes, {len(problems)} running upward or outside a room")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
