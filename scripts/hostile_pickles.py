#!/usr/bin/env python3
"""Writes four hostile PyTorch files into the directory given as argument.

Each is a ZIP laid out as torch.save writes one (archive/data.pkl, archive/byteorder,
archive/data/0, archive/version, ...), whose pickle is a valid one-tensor state_dict plus a
call that unpickling would make:

  system.pt        protocol 2: posix.system("true"), its result popped (REDUCE, then POP)
  eval.pt          protocol 2: builtins.eval("0"), its result popped
  stack-global.pt  protocol 4: builtins.eval("0") named by STACK_GLOBAL, kept as a dict value
  runstring.pt     protocol 2: numpy.testing._private.utils.runstring("0", {}), a dict value

The pickles are assembled opcode by opcode (the byte formats of Lib/pickletools.py), so
nothing is imported or run while they are made; each is checked to decode with
pickletools.genops, which reads opcodes without running them. Standard library only:
tests/pytorch.rs and the fuzz corpus run it where torch is not installed.

Usage: python3 scripts/hostile_pickles.py OUT_DIR
"""

import io
import os
import pickle
import pickletools
import struct
import sys
import zipfile


def u8(v):
    return struct.pack("<B", v)


def text(s):
    """BINUNICODE: a 4-byte length, then UTF-8."""
    b = s.encode("utf-8")
    return pickle.BINUNICODE + struct.pack("<I", len(b)) + b


def short(s):
    """SHORT_BINUNICODE (protocol 4): a 1-byte length, then UTF-8."""
    b = s.encode("utf-8")
    return pickle.SHORT_BINUNICODE + u8(len(b)) + b


def global_(module, name):
    """GLOBAL: module and name, each a line."""
    return pickle.GLOBAL + module.encode() + b"\n" + name.encode() + b"\n"


def int1(v):
    return pickle.BININT1 + u8(v)


def tensor():
    """fc.weight as torch.save writes a tensor: _rebuild_tensor_v2(storage, 0, (2, 2), (2, 1),
    False, OrderedDict()), the storage a persistent id ('storage', FloatStorage, '0', 'cpu', 4)."""
    return b"".join([
        global_("torch._utils", "_rebuild_tensor_v2"),
        pickle.MARK,
        pickle.MARK, text("storage"), global_("torch", "FloatStorage"), text("0"), text("cpu"), int1(4),
        pickle.TUPLE, pickle.BINPERSID,
        int1(0),
        int1(2), int1(2), pickle.TUPLE2,
        int1(2), int1(1), pickle.TUPLE2,
        pickle.NEWFALSE,
        global_("collections", "OrderedDict"), pickle.EMPTY_TUPLE, pickle.REDUCE,
        pickle.TUPLE, pickle.REDUCE,
    ])


def state_dict(middle, end=b""):
    """PROTO 2, an OrderedDict; `middle` with the dict on top of the stack; fc.weight set in it;
    `end` (more SETITEMs); STOP."""
    return b"".join([
        pickle.PROTO + u8(2),
        global_("collections", "OrderedDict"), pickle.EMPTY_TUPLE, pickle.REDUCE, pickle.BINPUT + u8(0),
        middle,
        text("fc.weight"), tensor(), pickle.SETITEM,
        end,
        pickle.STOP,
    ])


def called_and_popped(module, name):
    """module.name("true"), its result popped: the parsed state_dict shows no trace of it."""
    return global_(module, name) + text("true") + pickle.TUPLE1 + pickle.REDUCE + pickle.POP


def stack_global_eval():
    """Protocol 4: {'fc.weight': tensor, 'note': eval('0')}, eval named by STACK_GLOBAL from
    two memoized strings."""
    body = b"".join([
        pickle.EMPTY_DICT, pickle.MEMOIZE,
        pickle.MARK,
        short("fc.weight"), tensor(),
        short("note"),
        short("builtins"), pickle.MEMOIZE, short("eval"), pickle.MEMOIZE, pickle.STACK_GLOBAL, pickle.MEMOIZE,
        short("0"), pickle.TUPLE1, pickle.REDUCE,
        pickle.SETITEMS,
        pickle.STOP,
    ])
    return pickle.PROTO + u8(4) + pickle.FRAME + struct.pack("<Q", len(body)) + body


def runstring():
    """{'fc.weight': tensor, 'note': runstring('0', {})}: numpy's helper that exec()s a string."""
    call = global_("numpy.testing._private.utils", "runstring") + text("0") + pickle.EMPTY_DICT + pickle.TUPLE2 + pickle.REDUCE
    return state_dict(b"", text("note") + call + pickle.SETITEM)


PICKLES = {
    "system.pt": state_dict(called_and_popped("posix", "system")),
    "eval.pt": state_dict(called_and_popped("builtins", "eval")),
    "stack-global.pt": stack_global_eval(),
    "runstring.pt": runstring(),
}


def write(path, data_pkl):
    """A ZIP as torch.save lays one out (stored entries under archive/)."""
    storage = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        for name, data in [
            ("archive/data.pkl", data_pkl),
            ("archive/.format_version", b"1"),
            ("archive/.storage_alignment", b"64"),
            ("archive/byteorder", b"little"),
            ("archive/data/0", storage),
            ("archive/version", b"3\n"),
        ]:
            z.writestr(name, data)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, data in PICKLES.items():
        # Decodes every opcode (no import, no call) and ends at STOP, or raises.
        ops = list(pickletools.genops(io.BytesIO(data)))
        assert ops[-1][0].name == "STOP" and ops[-1][2] == len(data) - 1, name
        path = os.path.join(out, name)
        write(path, data)
        print(path)


if __name__ == "__main__":
    main()
