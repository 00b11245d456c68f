#!/usr/bin/env python3
"""Loom's list of the MPI functions that take a user data buffer, read from
the MPI's own header at build time (so a newer MPI's functions are covered
when Loom is rebuilt), and the code made from it.

    gen_buffer_calls.py MPI_H_PREPROCESSED OUT_DIR

The input is mpi.h run through the C preprocessor, so the declarations are
the ones a compiler sees under this MPI's configuration. Written to OUT_DIR
(each file only when its text changes, so nothing rebuilds needlessly):

  mpi_buffer_calls.hpp       LOOM_MPI_HAS_<fn> for every MPI function the
                             header declares (hand-written code guards the
                             calls that only some MPIs have with these)
  mpi_buffer_calls.cpp       an interposer for every function with a buffer:
                             a device buffer gets MPI_ERR_BUFFER through the
                             communicator's, window's or file's handler,
                             anything else goes to the next definition. Each
                             is a weak symbol: Loom's own definition of a
                             function (one that moves device data) wins at
                             link time.
  mpi_buffer_calls_test.inc  the same list for the test: each function called
                             with device buffers and placeholder arguments.

A parameter is a data buffer when it is `void *` or `const void *`, except
those that hold addresses or attribute values rather than data (below): a
function new to the header is thus refused for device buffers by default.
"""
import os
import re
import sys

# void* parameters that are not data: attribute values, callback state, the
# address out-arguments of allocators, MPI_Get_address's location.
NOT_DATA_PARAMS = {
    "attribute_val", "attribute_val_in", "attribute_val_out", "attr_val", "attr_value",
    "extra_state", "baseptr", "location", "buffer_addr",
}
# Functions whose void* is memory the MPI gave out or an out-pointer.
NOT_DATA_FUNCTIONS = {"MPI_Free_mem", "MPI_Buffer_detach", "MPI_Buffer_detach_c"}


def strip_attributes(text):
    """Drops __attribute__((...)) with balanced parentheses."""
    out, i = [], 0
    while True:
        j = text.find("__attribute__", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        k = text.index("(", j)
        depth = 0
        while True:
            if text[k] == "(":
                depth += 1
            elif text[k] == ")":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        i = k + 1


def split_params(text):
    parts, depth, cur = [], 0, []
    for c in text:
        if c == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        depth += c in "([" and 1 or (c in ")]" and -1 or 0)
        cur.append(c)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


class Param:
    def __init__(self, text, index):
        m = re.fullmatch(r"(.*?[\s*])(\w+)\s*((?:\[[^\]]*\]\s*)*)", text)
        if m and m.group(1).strip() and m.group(2) not in ("void", "int", "char"):
            self.type, self.name, self.arrays = m.group(1).strip(), m.group(2), m.group(3).strip()
        else:  # unnamed
            self.type, self.name, self.arrays = text.strip(), "", ""
        self.var = "a%d" % index
        self.norm = re.sub(r"\s+", "", self.type)

    def decl(self):
        return "%s %s%s" % (self.type, self.var, self.arrays)

    def pointer(self):
        return self.arrays != "" or self.norm.endswith("*")


class Function:
    def __init__(self, name, params):
        self.name = name
        self.params = params
        self.buffers = [i for i, p in enumerate(params)
                        if p.norm in ("void*", "constvoid*") and p.name not in NOT_DATA_PARAMS
                        and name not in NOT_DATA_FUNCTIONS]

    def handle(self):
        """The object whose error handler a refusal goes through."""
        for kind in ("MPI_File", "MPI_Win", "MPI_Comm"):
            for p in self.params:
                if p.norm == kind and not p.arrays:
                    return kind[4:].lower(), p.var
        return "none", ""

    def device_test(self, i):
        p, n = self.params, len(self.params)
        if (i + 2 < n and not p[i + 1].pointer() and p[i + 1].norm in ("int", "MPI_Count")
                and p[i + 2].norm == "MPI_Datatype" and not p[i + 2].arrays):
            return "device_arg(%s, %s, %s)" % (p[i].var, p[i + 1].var, p[i + 2].var)
        return "device_arg(%s)" % p[i].var


def parse(text):
    text = re.sub(r"\s+", " ", strip_attributes(text))
    functions = {}
    for stmt in re.split(r"[;{}]", text):
        m = re.fullmatch(r"\s*(?:extern\s+)?int\s+(MPIX?_\w+)\s*\((.*)\)\s*", stmt)
        if not m or "(" in m.group(2) or "..." in m.group(2):
            continue
        name, plist = m.groups()
        params = [] if plist.strip() in ("", "void") else split_params(plist)
        functions[name] = Function(name, [Param(t, i) for i, t in enumerate(params)])
    return functions


def interposer(f):
    kind, var = f.handle()
    decl = ", ".join(p.decl() for p in f.params)
    args = ", ".join(p.var for p in f.params)
    test = " || ".join(f.device_test(i) for i in f.buffers)
    refuse = "refuse_%s(%s\"%s\")" % (kind, var + ", " if var else "", f.name)
    return ("static int loom_gen_%s(%s) {\n"
            "  if (%s) return %s;\n"
            "  return LOOM_NEXT(%s)(%s);\n"
            "}\n"
            "int %s(%s) __attribute__((weak, alias(\"loom_gen_%s\")));\n"
            % (f.name, decl, test, refuse, f.name, args, f.name, decl, f.name))


def placeholder(f, p, i):
    """An argument for a call that Loom refuses before it reads the others."""
    if i in f.buffers:
        return "x.dev(%d)" % f.buffers.index(i)
    if p.norm in ("MPI_Comm", "MPI_Win", "MPI_File") and not p.arrays:
        return "x.%s" % p.norm[4:].lower()
    if p.pointer():
        base = p.type if p.arrays else p.type[:-1].strip()
        if re.sub(r"\s+", "", base) in ("constchar", "char"):
            return "x.text()"
        return "static_cast<%s*>(x.scratch())" % base
    fixed = {"MPI_Datatype": "MPI_INT", "MPI_Op": "MPI_SUM", "MPI_Info": "MPI_INFO_NULL",
             "MPI_Message": "MPI_MESSAGE_NULL", "MPI_Request": "MPI_REQUEST_NULL",
             "MPI_Group": "MPI_GROUP_NULL"}
    if p.norm in fixed:
        return fixed[p.norm]
    if p.norm in ("int", "MPI_Count", "MPI_Aint", "MPI_Offset"):
        return "1"
    return "%s{}" % p.type


def test_entry(f):
    kind, _ = f.handle()
    args = ", ".join(placeholder(f, p, i) for i, p in enumerate(f.params))
    return ("  {\"%s\", Handle::k%s, %d, [](Args& x) { return %s(%s); }},\n"
            % (f.name, kind.capitalize(), len(f.buffers), f.name, args))


def write(path, text):
    try:
        with open(path) as old:
            if old.read() == text:
                return
    except OSError:
        pass
    with open(path, "w") as out:
        out.write(text)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gen_buffer_calls.py MPI_H_PREPROCESSED OUT_DIR")
    with open(sys.argv[1]) as f:
        functions = parse(f.read())
    # The tool interface (MPI_T_) reads and writes the MPI's own variables.
    calls = [f for n, f in sorted(functions.items()) if f.buffers and not n.startswith("MPI_T_")]
    if not calls:
        sys.exit("gen_buffer_calls.py: no MPI function with a buffer found in " + sys.argv[1])
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    banner = "// Generated by cmake/gen_buffer_calls.py from this MPI's mpi.h: do not edit.\n"
    write(os.path.join(out, "mpi_buffer_calls.hpp"),
          banner + "#pragma once\n\n" +
          "".join("#define LOOM_MPI_HAS_%s 1\n" % n for n in sorted(functions)) +
          "\n#define LOOM_MPI_BUFFER_CALLS %d\n" % len(calls))
    body = "".join(interposer(f) for f in calls)
    table = "".join("    {\"%s\", reinterpret_cast<void*>(&loom_gen_%s)},\n" % (f.name, f.name)
                    for f in calls)
    write(os.path.join(out, "mpi_buffer_calls.cpp"),
          banner + "#include \"mpi/buffer_calls.hpp\"\n\n"
          "using namespace loom::mpi;\n\n"
          "extern \"C\" {\n" + body + "}  // extern \"C\"\n\n"
          "namespace loom::mpi {\n"
          "const std::vector<BufferCall>& buffer_calls() {\n"
          "  static const std::vector<BufferCall> calls = {\n" + table + "  };\n"
          "  return calls;\n}\n}  // namespace loom::mpi\n")
    write(os.path.join(out, "mpi_buffer_calls_test.inc"),
          banner + "".join(test_entry(f) for f in calls))


if __name__ == "__main__":
    main()
