//! Refusing pickles that reach beyond weights, before anything parses them.
//!
//! A PyTorch `.pt`/`.pth` file holds pickles: programs for Python's unpickler, which imports
//! and calls whatever a pickle names. resilab never runs them (Burn's `pytorch-reader` parses
//! them), but a file whose pickle would run code when PyTorch loads it is no state_dict, and
//! whoever made it meant harm or a mistake. [`check`] walks every opcode of every pickle the
//! reader would parse, with a symbolic stack and memo, as CPython's unpickler would run them,
//! and accepts only names on two exact lists: [`CALLABLES`], which a pickle may call, and
//! [`REFERENCES`], which it may only name. An unlisted name, a call of anything else, state set
//! on an object no listed callable made, and the copyreg extension registry are refused with
//! the opcode and its byte offset; so is a stream the unpickler would reject.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use burn_store::pytorch_reader::MAX_PICKLE_SIZE;
use zip::ZipArchive;
use zip::read::ZipReadOptions;

use crate::{Error, Result};

/// What a weights file's pickle may call (`REDUCE`, `NEWOBJ`, `NEWOBJ_EX`, `OBJ`, `INST`), as
/// (module, name), matched exactly. These are the constructors `torch.load(weights_only=True)`
/// allows by default (`torch._weights_only_unpickler._get_allowed_globals`), plus the few
/// protocol-2 helpers and numpy scalars training checkpoints hold; each builds data and runs
/// nothing the pickle chooses.
pub const CALLABLES: &[(&str, &str)] = &[
    // A state_dict is an OrderedDict; Counter is torch's other allowed dict.
    ("collections", "OrderedDict"),
    ("collections", "Counter"),
    // Every tensor: _v2 since PyTorch 1.0, the first before it, _v3 for dtypes without a storage
    // class (uint16 and the like); parameters in full-model and optimizer pickles; the other
    // tensor kinds torch.load allows by default (quantized, sparse, meta, wrapper subclasses,
    // device tensors saved through numpy or the CPU).
    ("torch._utils", "_rebuild_tensor"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_tensor_v3"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch._utils", "_rebuild_parameter_with_state"),
    ("torch._utils", "_rebuild_qtensor"),
    ("torch._utils", "_rebuild_sparse_tensor"),
    ("torch._utils", "_rebuild_meta_tensor_no_storage"),
    ("torch._utils", "_rebuild_wrapper_subclass"),
    ("torch._utils", "_rebuild_device_tensor_from_numpy"),
    ("torch._utils", "_rebuild_device_tensor_from_cpu_tensor"),
    // A tensor with Python attributes, or of a subclass.
    ("torch._tensor", "_rebuild_from_type_v2"),
    // A sparse tensor's layout, by name.
    ("torch.serialization", "_get_layout"),
    // Shapes and devices pickled as themselves.
    ("torch", "Size"),
    ("torch", "device"),
    // How protocol 2 pickles bytes (`_codecs.encode(text, "latin1")`, `bytes()` when empty),
    // bytearrays, sets, frozensets and complex numbers, which have no opcodes of their own there.
    ("_codecs", "encode"),
    ("builtins", "bytes"),
    ("builtins", "bytearray"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "complex"),
    // numpy scalars (a training checkpoint's best_acc), arrays and their dtypes: numpy 1 names
    // the module `numpy.core`, numpy 2 `numpy._core`.
    ("numpy.core.multiarray", "scalar"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "dtype"),
];

/// What a weights file's pickle may name but never call (an argument of a listed callable, or a
/// storage's type in a persistent id), as (module, name), matched exactly. A listed callable may
/// call its arguments (`_rebuild_from_type_v2` does), so each of these is harmless called too:
/// a storage class allocates, a dtype or qscheme is not callable.
pub const REFERENCES: &[(&str, &str)] = &[
    // The storage types torch.save puts in each storage's persistent id.
    ("torch", "DoubleStorage"),
    ("torch", "FloatStorage"),
    ("torch", "HalfStorage"),
    ("torch", "BFloat16Storage"),
    ("torch", "LongStorage"),
    ("torch", "IntStorage"),
    ("torch", "ShortStorage"),
    ("torch", "CharStorage"),
    ("torch", "ByteStorage"),
    ("torch", "BoolStorage"),
    ("torch", "ComplexDoubleStorage"),
    ("torch", "ComplexFloatStorage"),
    ("torch", "QUInt8Storage"),
    ("torch", "QInt8Storage"),
    ("torch", "QInt32Storage"),
    ("torch", "QUInt4x2Storage"),
    ("torch", "QUInt2x4Storage"),
    ("torch", "UntypedStorage"),
    ("torch", "TypedStorage"),
    ("torch.storage", "UntypedStorage"),
    ("torch.storage", "TypedStorage"),
    // GPU storages, as PyTorch before 1.12 named them in checkpoints saved from a GPU.
    ("torch.cuda", "DoubleStorage"),
    ("torch.cuda", "FloatStorage"),
    ("torch.cuda", "HalfStorage"),
    ("torch.cuda", "BFloat16Storage"),
    ("torch.cuda", "LongStorage"),
    ("torch.cuda", "IntStorage"),
    ("torch.cuda", "ShortStorage"),
    ("torch.cuda", "CharStorage"),
    ("torch.cuda", "ByteStorage"),
    ("torch.cuda", "BoolStorage"),
    // dtypes (`_rebuild_tensor_v3`, `_rebuild_meta_tensor_no_storage`, a saved dtype).
    ("torch", "float64"),
    ("torch", "float32"),
    ("torch", "float16"),
    ("torch", "bfloat16"),
    ("torch", "float8_e4m3fn"),
    ("torch", "float8_e5m2"),
    ("torch", "float8_e4m3fnuz"),
    ("torch", "float8_e5m2fnuz"),
    ("torch", "complex32"),
    ("torch", "complex64"),
    ("torch", "complex128"),
    ("torch", "int64"),
    ("torch", "int32"),
    ("torch", "int16"),
    ("torch", "int8"),
    ("torch", "uint64"),
    ("torch", "uint32"),
    ("torch", "uint16"),
    ("torch", "uint8"),
    ("torch", "bool"),
    ("torch", "qint8"),
    ("torch", "quint8"),
    ("torch", "qint32"),
    ("torch", "quint4x2"),
    ("torch", "quint2x4"),
    // The quantization schemes of `_rebuild_qtensor`.
    ("torch", "per_tensor_affine"),
    ("torch", "per_tensor_symmetric"),
    ("torch", "per_channel_affine"),
    ("torch", "per_channel_symmetric"),
    ("torch", "per_channel_affine_float_qparams"),
    // The classes a tensor subclass or array is rebuilt as (`_rebuild_from_type_v2`,
    // `_rebuild_wrapper_subclass`, numpy's `_reconstruct`).
    ("torch", "Tensor"),
    ("torch.nn.parameter", "Parameter"),
    ("numpy", "ndarray"),
];

/// Most entries the walk keeps on its stack, among its marks, or in its memo: far above any
/// checkpoint's (a ResNet-50 state_dict's memo holds about 2,000), far below gigabytes.
const MAX_ENTRIES: usize = 1 << 22;

/// The longest string kept as a possible module or name (longer ones can name nothing listed).
const MAX_NAME: usize = 256;

/// How much of a legacy or plain pickle stream is read first; more is read when its pickles
/// run on, up to [`MAX_PICKLE_SIZE`].
const FIRST_READ: u64 = 1 << 20;

/// The five pickles a legacy (PyTorch 0.1.10 to 1.5) file opens with, before its storages.
const LEGACY_PICKLES: [&str; 5] = ["magic number", "protocol version", "system info", "saved object", "storage key list"];

/// Checks every pickle in the PyTorch file `path` against the lists, running nothing. The
/// container is told as Burn's reader tells it: a ZIP (PyTorch 1.6 and later: its `data.pkl`),
/// a legacy stream (its first five pickles), a plain pickle; a TAR file (before PyTorch 0.1.10)
/// is refused. Every tensor's view must lie within its storage, and (in a ZIP) every storage
/// within its entry. Returns the names tensors are stored under, in the order the pickle sets
/// them, and the tensors' views.
pub fn check(path: &Path) -> Result<Checked> {
    // Never a FIFO (which would block) or a device: only a regular file is opened.
    let mut file = resilab_limits::RegularFile::open("import", path)?.into_file();
    let mut header = Vec::new();
    (&mut file).take(HEADER_LEN as u64).read_to_end(&mut header).map_err(|e| Error::file(path, format!("cannot be read: {e}")))?;
    match detect(&header) {
        Format::Zip => check_zip(path, file),
        Format::Tar => Err(Error::file(
            path,
            "is a TAR-format PyTorch file (saved by PyTorch before 0.1.10), which resilab does not read: re-save it with a current torch.save",
        )),
        Format::Legacy => check_stream(path, &mut file, &LEGACY_PICKLES),
        Format::Pickle => check_stream(path, &mut file, &["pickle"]),
        Format::Unknown => Err(unreadable(path, "no ZIP, legacy or pickle header found")),
    }
}

/// What [`check`] found in a file it accepts.
#[derive(Clone, Debug, Default)]
pub struct Checked {
    /// The names tensors are set under, in the order the pickle sets them.
    pub keys: Vec<String>,
    /// The tensors' views on their storages, in the order the pickle builds them.
    pub views: Vec<View>,
}

/// The containers `pytorch_reader` tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Zip,
    Tar,
    Legacy,
    Pickle,
    Unknown,
}

/// Offset of the `ustar` magic within a TAR header.
const TAR_MAGIC_AT: usize = 257;
/// How much of the file [`detect`] looks at.
const HEADER_LEN: usize = TAR_MAGIC_AT + 5;
/// The legacy magic number (0x1950a86a20f9469cfc6c) as LONG1 writes it, and as INT text.
const LEGACY_MAGIC_BYTES: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
const LEGACY_MAGIC_TEXT: &[u8] = b"119547037146038801333356";
/// How far into the file the legacy magic is looked for.
const LEGACY_MAGIC_SEARCH: usize = 64;

/// The format of a file that opens with `header`, decided as `pytorch_reader`'s `detect_format`
/// decides it, so that the pickles walked here are the ones it parses.
fn detect(header: &[u8]) -> Format {
    let window = &header[..header.len().min(LEGACY_MAGIC_SEARCH)];
    let legacy = window.windows(LEGACY_MAGIC_BYTES.len()).any(|w| w == LEGACY_MAGIC_BYTES)
        || window.windows(LEGACY_MAGIC_TEXT.len()).any(|w| w == LEGACY_MAGIC_TEXT);
    // A safetensors file opens with a little-endian u64 header length, then `{`.
    let safetensors = header.first_chunk::<8>().is_some_and(|b| u64::from_le_bytes(*b) <= 100_000_000) && header.get(8) == Some(&b'{');
    if header.starts_with(b"PK\x03\x04") || header.starts_with(b"PK\x05\x06") {
        Format::Zip
    } else if header.get(TAR_MAGIC_AT..TAR_MAGIC_AT + 5) == Some(b"ustar") {
        Format::Tar
    } else if legacy {
        Format::Legacy
    } else if matches!(header.first(), Some(0x80 | b'(' | b'}' | b']' | b'c')) && !safetensors {
        Format::Pickle
    } else {
        Format::Unknown
    }
}

fn unreadable(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::file(path, format!("is not a readable PyTorch file: {what}"))
}

/// The error for a refusal at `where_` (an archive entry, or the file).
fn refused(path: &Path, where_: &str, refusal: Refusal) -> Error {
    match refusal {
        Refusal::Code { at, what } => Error::file(
            path,
            format!(
                "holds a pickle that reaches beyond weights ({what} at byte {at} of {where_}): unpickling it could run code, so resilab reads none of it (nothing was run)"
            ),
        ),
        Refusal::Invalid { at, what } | Refusal::Truncated { at, what } => {
            unreadable(path, format!("not a valid pickle ({what} at byte {at} of {where_})"))
        }
        Refusal::Limit { at, what } => {
            unreadable(path, format!("its pickle holds {what} (at byte {at} of {where_}), more than resilab reads"))
        }
    }
}

/// Checks the `data.pkl` of a PyTorch 1.6+ ZIP archive, once its layout has passed
/// [`zipcheck::check`](crate::zipcheck::check) (one reading for every reader: no repeated
/// name, no local header that disagrees with the central directory, no bytes no record
/// claims). Its root is found as `pytorch_reader` finds it: the directory of an entry named
/// `data.pkl`. An archive with more than one is refused: PyTorch picks the first entry's
/// directory, the reader the shortest, so each could load a different pickle.
fn check_zip(path: &Path, mut file: File) -> Result<Checked> {
    let len = file.metadata().map_err(|e| Error::file(path, format!("cannot be read: {e}")))?.len();
    let entries = crate::zipcheck::check(&mut file, len).map_err(|e| unreadable(path, format!("its ZIP archive: {e}")))?;
    // From the start, as the reader opens it: the zip crate reads offsets from where it starts.
    file.seek(SeekFrom::Start(0)).map_err(|e| Error::file(path, format!("cannot be read: {e}")))?;
    let mut archive = ZipArchive::new(BufReader::new(file)).map_err(|e| unreadable(path, format!("its ZIP archive: {e}")))?;
    let names: Vec<String> = archive
        .file_names()
        .map(|n| n.map(|n| n.into_owned()))
        .collect::<zip::result::ZipResult<_>>()
        .map_err(|e| unreadable(path, format!("its ZIP archive: {e}")))?;
    let mut pickles: Vec<&String> =
        names.iter().filter(|n| n.strip_suffix("data.pkl").is_some_and(|root| root.is_empty() || root.ends_with('/'))).collect();
    pickles.sort_by_key(|n| n.len());
    let name = match pickles.as_slice() {
        [] => return Err(unreadable(path, "its ZIP archive holds no data.pkl (a PyTorch 1.6+ checkpoint has one)")),
        [one] => one.as_str(),
        more => {
            let list = more.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ");
            return Err(unreadable(path, format!("its ZIP archive holds {} data.pkl entries ({list}); torch.save writes one", more.len())));
        }
    };
    let bytes = read_entry(&mut archive, name).map_err(|e| unreadable(path, format!("ZIP entry {name}: {e}")))?;
    let (_, keys, views) = walk_views(&bytes, 0, MAX_ENTRIES).map_err(|r| refused(path, name, r))?;
    let sizes: HashMap<String, u64> = entries.into_iter().map(|e| (e.name, e.size)).collect();
    check_views(path, &views, Some((name.trim_end_matches("data.pkl"), &sizes)))?;
    Ok(Checked { keys, views })
}

/// The bytes of the archive entry `name`, refused beyond [`MAX_PICKLE_SIZE`] whatever size its
/// header declares. A CRC of 0 means none was computed (torch.save after
/// `torch.serialization.set_crc32_options(False)`), as `pytorch_reader` takes it.
fn read_entry<R: Read + Seek>(archive: &mut ZipArchive<R>, name: &str) -> std::result::Result<Vec<u8>, String> {
    let index = archive.index_for_name(name).ok_or("not found")?;
    let crc = archive.by_index_raw(index).map_err(|e| e.to_string())?.crc32();
    let entry = archive.by_index_with_options(index, ZipReadOptions::new().ignore_crc32(crc == 0)).map_err(|e| e.to_string())?;
    let too_large = |size: u64| format!("{size} bytes, above the {MAX_PICKLE_SIZE} bytes resilab reads of a pickle");
    if entry.size() > MAX_PICKLE_SIZE {
        return Err(too_large(entry.size()));
    }
    let mut bytes = Vec::new();
    entry.take(MAX_PICKLE_SIZE + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_PICKLE_SIZE {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Checks the first `parts.len()` pickles of a stream that starts at byte 0 of `file`: a legacy
/// file's five, a plain pickle file's one. What follows them (a legacy file's storages) is not
/// read; the prefix read grows while a pickle runs past it.
fn check_stream(path: &Path, file: &mut File, parts: &[&str]) -> Result<Checked> {
    let io = |e: std::io::Error| Error::file(path, format!("cannot be read: {e}"));
    let mut limit = FIRST_READ;
    loop {
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        let mut data = Vec::new();
        file.take(limit).read_to_end(&mut data).map_err(io)?;
        let whole = (data.len() as u64) < limit;
        let mut at = 0;
        let mut failed = None;
        let mut checked = Checked::default();
        for (i, part) in parts.iter().enumerate() {
            match walk_views(&data, at, MAX_ENTRIES) {
                Ok((end, keys, views)) => {
                    at = end;
                    checked.keys.extend(keys);
                    checked.views.extend(views);
                }
                Err(r) => {
                    failed = Some((i, part, r));
                    break;
                }
            }
        }
        let Some((i, part, refusal)) = failed else {
            check_views(path, &checked.views, None)?;
            return Ok(checked);
        };
        if matches!(refusal, Refusal::Truncated { .. }) && !whole {
            if limit >= MAX_PICKLE_SIZE {
                return Err(unreadable(path, format!("its pickles run past the first {MAX_PICKLE_SIZE} bytes, the most resilab reads")));
            }
            limit = (limit * 4).min(MAX_PICKLE_SIZE);
            continue;
        }
        let where_ =
            if parts.len() == 1 { "the file".to_string() } else { format!("the file (pickle {} of {}: the {part})", i + 1, parts.len()) };
        return Err(refused(path, &where_, refusal));
    }
}

/// Why a pickle is refused; `at` is the byte offset of the opcode.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Refusal {
    /// The pickle would reach beyond the lists: `what` names the opcode and the name.
    Code { at: usize, what: String },
    /// CPython's unpickler would reject the stream.
    Invalid { at: usize, what: String },
    /// The stream ends within an opcode or before STOP (invalid, unless more bytes follow).
    Truncated { at: usize, what: String },
    /// The stack, marks or memo would hold more than [`MAX_ENTRIES`].
    Limit { at: usize, what: String },
}

/// A value on the walk's stack or in its memo: only what decides what may be called is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Value {
    /// A string of at most [`MAX_NAME`] bytes: where its bytes are in the pickle.
    Str { at: u32, len: u16 },
    /// A listed name: its index in [`listed`].
    Global(u16),
    /// What the listed callable of this index returned.
    Made(u16),
    /// An integer that fits an `i64`.
    Int(i64),
    /// A tuple of at most [`MAX_TUPLE`] values: its index in the walk's tuples.
    Tuple(u32),
    /// A storage's persistent id: its index in the walk's storages.
    Storage(u32),
    /// A tensor the listed `_rebuild_*` callable `made` built on a storage: the index of its
    /// view in the walk's views.
    Tensor { made: u16, view: u32 },
    /// Anything else: bytes, containers, longer strings, longer tuples.
    Other,
}

/// The listed name of index `i`: [`CALLABLES`], then [`REFERENCES`]; and whether it may be called.
fn listed(i: u16) -> ((&'static str, &'static str), bool) {
    let i = usize::from(i);
    match CALLABLES.get(i) {
        Some(&name) => (name, true),
        None => (REFERENCES.get(i - CALLABLES.len()).copied().unwrap_or(("?", "?")), false),
    }
}

fn dotted(i: u16) -> String {
    let ((module, name), _) = listed(i);
    format!("{module}.{name}")
}

/// The index of (module, name) on the lists. Python 2's `__builtin__` is `builtins`, as
/// unpickling maps it.
fn lookup(module: &[u8], name: &[u8]) -> Option<u16> {
    let module = if module == b"__builtin__" { b"builtins".as_slice() } else { module };
    CALLABLES.iter().chain(REFERENCES).position(|(m, n)| m.as_bytes() == module && n.as_bytes() == name).and_then(|i| u16::try_from(i).ok())
}

/// `module.name` for a message: lossy UTF-8, control characters escaped, at most 120 characters.
fn shown(module: &[u8], name: &[u8]) -> String {
    let text = format!("{}.{}", String::from_utf8_lossy(module), String::from_utf8_lossy(name));
    let escaped: String = text.chars().flat_map(char::escape_debug).collect();
    match escaped.char_indices().nth(120) {
        Some((end, _)) => format!("{}...", &escaped[..end]),
        None => escaped,
    }
}

/// How an opcode's argument is laid out after it (CPython's `pickletools`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arg {
    /// None.
    Nothing,
    /// This many bytes.
    Fixed(usize),
    /// Bytes up to a newline.
    Line,
    /// Two newline-terminated lines (module, name).
    Lines2,
    /// An unsigned little-endian length of this many bytes, then that many bytes.
    Counted(usize),
    /// A signed little-endian 4-byte length (negative is invalid), then that many bytes.
    SignedCounted4,
}

/// The opcodes of pickle protocols 0 to 5, by byte.
mod op {
    pub const MARK: u8 = b'(';
    pub const STOP: u8 = b'.';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const FLOAT: u8 = b'F';
    pub const INT: u8 = b'I';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const LONG: u8 = b'L';
    pub const BININT2: u8 = b'M';
    pub const NONE: u8 = b'N';
    pub const PERSID: u8 = b'P';
    pub const BINPERSID: u8 = b'Q';
    pub const REDUCE: u8 = b'R';
    pub const STRING: u8 = b'S';
    pub const BINSTRING: u8 = b'T';
    pub const SHORT_BINSTRING: u8 = b'U';
    pub const UNICODE: u8 = b'V';
    pub const BINUNICODE: u8 = b'X';
    pub const APPEND: u8 = b'a';
    pub const BUILD: u8 = b'b';
    pub const GLOBAL: u8 = b'c';
    pub const DICT: u8 = b'd';
    pub const EMPTY_DICT: u8 = b'}';
    pub const APPENDS: u8 = b'e';
    pub const GET: u8 = b'g';
    pub const BINGET: u8 = b'h';
    pub const INST: u8 = b'i';
    pub const LONG_BINGET: u8 = b'j';
    pub const LIST: u8 = b'l';
    pub const EMPTY_LIST: u8 = b']';
    pub const OBJ: u8 = b'o';
    pub const PUT: u8 = b'p';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const SETITEM: u8 = b's';
    pub const TUPLE: u8 = b't';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const SETITEMS: u8 = b'u';
    pub const BINFLOAT: u8 = b'G';
    pub const PROTO: u8 = 0x80;
    pub const NEWOBJ: u8 = 0x81;
    pub const EXT1: u8 = 0x82;
    pub const EXT2: u8 = 0x83;
    pub const EXT4: u8 = 0x84;
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const LONG1: u8 = 0x8a;
    pub const LONG4: u8 = 0x8b;
    pub const BINBYTES: u8 = b'B';
    pub const SHORT_BINBYTES: u8 = b'C';
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const BINBYTES8: u8 = 0x8e;
    pub const EMPTY_SET: u8 = 0x8f;
    pub const ADDITEMS: u8 = 0x90;
    pub const FROZENSET: u8 = 0x91;
    pub const NEWOBJ_EX: u8 = 0x92;
    pub const STACK_GLOBAL: u8 = 0x93;
    pub const MEMOIZE: u8 = 0x94;
    pub const FRAME: u8 = 0x95;
    pub const BYTEARRAY8: u8 = 0x96;
    pub const NEXT_BUFFER: u8 = 0x97;
    pub const READONLY_BUFFER: u8 = 0x98;
}

/// The name and argument layout of opcode `code`; `None` for a byte that is no opcode.
fn describe(code: u8) -> Option<(&'static str, Arg)> {
    use Arg::*;
    use op::*;
    Some(match code {
        MARK => ("MARK", Nothing),
        STOP => ("STOP", Nothing),
        POP => ("POP", Nothing),
        POP_MARK => ("POP_MARK", Nothing),
        DUP => ("DUP", Nothing),
        FLOAT => ("FLOAT", Line),
        INT => ("INT", Line),
        BININT => ("BININT", Fixed(4)),
        BININT1 => ("BININT1", Fixed(1)),
        LONG => ("LONG", Line),
        BININT2 => ("BININT2", Fixed(2)),
        NONE => ("NONE", Nothing),
        PERSID => ("PERSID", Line),
        BINPERSID => ("BINPERSID", Nothing),
        REDUCE => ("REDUCE", Nothing),
        STRING => ("STRING", Line),
        BINSTRING => ("BINSTRING", SignedCounted4),
        SHORT_BINSTRING => ("SHORT_BINSTRING", Counted(1)),
        UNICODE => ("UNICODE", Line),
        BINUNICODE => ("BINUNICODE", Counted(4)),
        APPEND => ("APPEND", Nothing),
        BUILD => ("BUILD", Nothing),
        GLOBAL => ("GLOBAL", Lines2),
        DICT => ("DICT", Nothing),
        EMPTY_DICT => ("EMPTY_DICT", Nothing),
        APPENDS => ("APPENDS", Nothing),
        GET => ("GET", Line),
        BINGET => ("BINGET", Fixed(1)),
        INST => ("INST", Lines2),
        LONG_BINGET => ("LONG_BINGET", Fixed(4)),
        LIST => ("LIST", Nothing),
        EMPTY_LIST => ("EMPTY_LIST", Nothing),
        OBJ => ("OBJ", Nothing),
        PUT => ("PUT", Line),
        BINPUT => ("BINPUT", Fixed(1)),
        LONG_BINPUT => ("LONG_BINPUT", Fixed(4)),
        SETITEM => ("SETITEM", Nothing),
        TUPLE => ("TUPLE", Nothing),
        EMPTY_TUPLE => ("EMPTY_TUPLE", Nothing),
        SETITEMS => ("SETITEMS", Nothing),
        BINFLOAT => ("BINFLOAT", Fixed(8)),
        PROTO => ("PROTO", Fixed(1)),
        NEWOBJ => ("NEWOBJ", Nothing),
        EXT1 => ("EXT1", Fixed(1)),
        EXT2 => ("EXT2", Fixed(2)),
        EXT4 => ("EXT4", Fixed(4)),
        TUPLE1 => ("TUPLE1", Nothing),
        TUPLE2 => ("TUPLE2", Nothing),
        TUPLE3 => ("TUPLE3", Nothing),
        NEWTRUE => ("NEWTRUE", Nothing),
        NEWFALSE => ("NEWFALSE", Nothing),
        LONG1 => ("LONG1", Counted(1)),
        LONG4 => ("LONG4", SignedCounted4),
        BINBYTES => ("BINBYTES", Counted(4)),
        SHORT_BINBYTES => ("SHORT_BINBYTES", Counted(1)),
        SHORT_BINUNICODE => ("SHORT_BINUNICODE", Counted(1)),
        BINUNICODE8 => ("BINUNICODE8", Counted(8)),
        BINBYTES8 => ("BINBYTES8", Counted(8)),
        EMPTY_SET => ("EMPTY_SET", Nothing),
        ADDITEMS => ("ADDITEMS", Nothing),
        FROZENSET => ("FROZENSET", Nothing),
        NEWOBJ_EX => ("NEWOBJ_EX", Nothing),
        STACK_GLOBAL => ("STACK_GLOBAL", Nothing),
        MEMOIZE => ("MEMOIZE", Nothing),
        FRAME => ("FRAME", Fixed(8)),
        BYTEARRAY8 => ("BYTEARRAY8", Counted(8)),
        NEXT_BUFFER => ("NEXT_BUFFER", Nothing),
        READONLY_BUFFER => ("READONLY_BUFFER", Nothing),
        _ => return None,
    })
}

/// The opcode being applied: its byte, name, offset, and its argument's bytes.
struct Op {
    code: u8,
    name: &'static str,
    at: usize,
    arg: std::ops::Range<usize>,
}

impl Op {
    fn invalid(&self, what: impl std::fmt::Display) -> Refusal {
        Refusal::Invalid { at: self.at, what: format!("{} {what}", self.name) }
    }

    fn code(&self, what: impl std::fmt::Display) -> Refusal {
        Refusal::Code { at: self.at, what: format!("{} {what}", self.name) }
    }
}

/// Walks the pickle that starts at byte `start` of `data` up to its STOP, and returns the offset
/// just past it. `limit` bounds the stack, the marks and the memo.
#[cfg(test)]
fn walk(data: &[u8], start: usize, limit: usize) -> std::result::Result<usize, Refusal> {
    walk_views(data, start, limit).map(|(end, _, _)| end)
}

/// Walks the pickle that starts at byte `start` of `data` up to its STOP; returns the offset
/// just past it, the names tensors are stored under in the order the pickle sets them (a
/// `state_dict`'s order: module registration order), and the tensors' views on their storages.
/// `limit` bounds the stack, the marks, the memo and the values kept in tuples.
fn walk_views(data: &[u8], start: usize, limit: usize) -> std::result::Result<(usize, Vec<String>, Vec<View>), Refusal> {
    let mut walker = Walker::new(data, start, limit);
    while !walker.step()? {}
    let text = |(at, len): (u32, u16)| String::from_utf8_lossy(&data[at as usize..at as usize + usize::from(len)]).into_owned();
    let keys = walker.keys.iter().map(|&k| text(k)).collect();
    let views = walker
        .views
        .iter()
        .filter_map(|v| {
            let s = walker.storages.get(v.storage as usize)?;
            let storage_bytes = s.numel.checked_mul(s.element);
            Some(View {
                name: v.name.map(text),
                storage: text(s.key),
                storage_bytes,
                element: v.element,
                offset: v.offset,
                shape: v.shape.clone(),
                stride: v.stride.clone(),
            })
        })
        .collect();
    Ok((walker.pos, keys, views))
}

/// CPython's unpickler, run on symbols: its stack (with marks as fences, as `_pickle.c` keeps
/// them) and memo hold [`Value`]s.
struct Walker<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u64, Value>,
    limit: usize,
    /// Where the names that tensors are set under are, in order.
    keys: Vec<(u32, u16)>,
    /// The tuples of at most [`MAX_TUPLE`] values, and how many values they hold in all.
    tuples: Vec<Vec<Value>>,
    tuple_values: usize,
    /// The storages persistent ids name, and the tensors built on them.
    storages: Vec<StorageId>,
    views: Vec<ViewAt>,
}

type Step<T = ()> = std::result::Result<T, Refusal>;

impl<'a> Walker<'a> {
    fn new(data: &'a [u8], pos: usize, limit: usize) -> Self {
        Walker {
            data,
            pos,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
            limit,
            keys: Vec::new(),
            tuples: Vec::new(),
            tuple_values: 0,
            storages: Vec::new(),
            views: Vec::new(),
        }
    }
}

impl Walker<'_> {
    /// Applies the next opcode; true after STOP.
    fn step(&mut self) -> Step<bool> {
        let at = self.pos;
        let Some(&code) = self.data.get(at) else {
            return Err(Refusal::Truncated { at, what: "end without STOP".into() });
        };
        self.pos += 1;
        let (name, arg) = describe(code).ok_or_else(|| Refusal::Invalid { at, what: format!("unknown opcode 0x{code:02x}") })?;
        let arg = self.argument(name, arg, at)?;
        let o = Op { code, name, at, arg };
        use op::*;
        match code {
            STOP => {
                self.pop(&o)?;
                return Ok(true);
            }
            PROTO | FRAME => self.header(&o)?,
            MARK | POP | POP_MARK | DUP => self.shuffle(&o)?,
            PUT | BINPUT | LONG_BINPUT | MEMOIZE | GET | BINGET | LONG_BINGET => self.remember(&o)?,
            GLOBAL | STACK_GLOBAL | INST | EXT1 | EXT2 | EXT4 => self.name(&o)?,
            REDUCE | NEWOBJ | NEWOBJ_EX | OBJ | BUILD => self.call(&o)?,
            APPEND | APPENDS | SETITEM | SETITEMS | ADDITEMS => self.fill(&o)?,
            LIST | TUPLE | DICT | FROZENSET | TUPLE1 | TUPLE2 | TUPLE3 | BINPERSID | READONLY_BUFFER => self.collect(&o)?,
            // Every other opcode pushes one value made from its argument alone.
            _ => {
                let value = self.datum(&o)?;
                self.push(value, &o)?;
            }
        }
        Ok(false)
    }

    /// Reads the argument laid out as `arg`, checking every length against the bytes left
    /// before it is used; returns where its bytes are (a counted argument's after its length).
    fn argument(&mut self, name: &str, arg: Arg, at: usize) -> Step<std::ops::Range<usize>> {
        let truncated = || Refusal::Truncated { at, what: format!("{name} with a truncated argument") };
        let left = self.data.len() - self.pos;
        let (skip, len) = match arg {
            Arg::Nothing => (0, 0),
            Arg::Fixed(n) => (0, n),
            Arg::Line => (0, self.data[self.pos..].iter().position(|&b| b == b'\n').ok_or_else(truncated)?),
            Arg::Lines2 => {
                let first = self.data[self.pos..].iter().position(|&b| b == b'\n').ok_or_else(truncated)?;
                let rest = &self.data[self.pos + first + 1..];
                (0, first + 1 + rest.iter().position(|&b| b == b'\n').ok_or_else(truncated)?)
            }
            Arg::Counted(width) => (width, self.le(width, at, name)?),
            Arg::SignedCounted4 => {
                let n = self.le(4, at, name)?;
                if n >= 1 << 31 {
                    return Err(Refusal::Invalid { at, what: format!("{name} with a negative length") });
                }
                (4, n)
            }
        };
        let newline = usize::from(matches!(arg, Arg::Line | Arg::Lines2));
        if skip.checked_add(len).and_then(|n| n.checked_add(newline)).is_none_or(|n| n > left) {
            return Err(truncated());
        }
        let start = self.pos + skip;
        self.pos = start + len + newline;
        Ok(start..start + len)
    }

    /// The unsigned little-endian number in the `width` bytes at the read position (saturated to
    /// `usize`); refused as truncated when fewer are left.
    fn le(&self, width: usize, at: usize, name: &str) -> Step<usize> {
        let bytes = self
            .data
            .get(self.pos..self.pos + width)
            .ok_or_else(|| Refusal::Truncated { at, what: format!("{name} with a truncated length") })?;
        let n = bytes.iter().rev().fold(0u64, |n, &b| (n << 8) | u64::from(b));
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn bytes(&self, o: &Op) -> &[u8] {
        &self.data[o.arg.clone()]
    }

    /// The little-endian number that is the opcode's fixed argument.
    fn number(&self, o: &Op) -> u64 {
        self.bytes(o).iter().rev().fold(0u64, |n, &b| (n << 8) | u64::from(b))
    }

    /// The bytes `range` as a [`Value::Str`] when short enough to name something.
    fn string(&self, range: std::ops::Range<usize>) -> Value {
        match (u32::try_from(range.start), u16::try_from(range.len())) {
            (Ok(at), Ok(len)) if range.len() <= MAX_NAME => Value::Str { at, len },
            _ => Value::Other,
        }
    }

    /// The value an opcode that only pushes makes of its argument: strings are kept (unless
    /// escaped: protocol 0's quoted STRING and raw-unicode-escaped UNICODE), all else is Other.
    fn datum(&mut self, o: &Op) -> Step<Value> {
        Ok(match o.code {
            op::STRING => {
                let text = self.bytes(o);
                let quoted = text.len() >= 2 && text[0] == text[text.len() - 1] && matches!(text[0], b'"' | b'\'');
                if !quoted {
                    return Err(o.invalid("with an unquoted argument"));
                }
                let inner = o.arg.start + 1..o.arg.end - 1;
                if self.data[inner.clone()].contains(&b'\\') { Value::Other } else { self.string(inner) }
            }
            op::UNICODE if self.bytes(o).contains(&b'\\') => Value::Other,
            op::UNICODE | op::BINSTRING | op::SHORT_BINSTRING | op::BINUNICODE | op::SHORT_BINUNICODE | op::BINUNICODE8 => {
                self.string(o.arg.clone())
            }
            op::BININT1 | op::BININT2 => Value::Int(self.number(o) as i64),
            op::BININT => Value::Int(i64::from(self.number(o) as u32 as i32)),
            op::LONG1 => signed_le(self.bytes(o)).map_or(Value::Other, Value::Int),
            op::INT | op::LONG => std::str::from_utf8(self.bytes(o))
                .ok()
                .and_then(|t| t.trim().trim_end_matches('L').parse::<i64>().ok())
                .map_or(Value::Other, Value::Int),
            op::EMPTY_TUPLE => self.tuple(Vec::new(), o)?,
            _ => Value::Other,
        })
    }

    /// Where the values above the last mark start.
    fn fence(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn push(&mut self, value: Value, o: &Op) -> Step {
        if self.stack.len() >= self.limit {
            return Err(Refusal::Limit { at: o.at, what: format!("more than {} values on its stack", self.limit) });
        }
        self.stack.push(value);
        Ok(())
    }

    fn pop(&mut self, o: &Op) -> Step<Value> {
        if self.stack.len() <= self.fence() {
            return Err(o.invalid("with too few values on the stack (stack underflow)"));
        }
        self.stack.pop().ok_or_else(|| o.invalid("on an empty stack"))
    }

    fn top(&self, o: &Op) -> Step<Value> {
        match self.stack.last() {
            Some(&v) if self.stack.len() > self.fence() => Ok(v),
            _ => Err(o.invalid("with too few values on the stack (stack underflow)")),
        }
    }

    /// Removes the values above the last mark and the mark; returns how many and the first.
    fn pop_mark(&mut self, o: &Op) -> Step<(usize, Option<Value>)> {
        let mark = self.marks.pop().ok_or_else(|| o.invalid("without a MARK"))?;
        let count = self.stack.len().saturating_sub(mark);
        let first = self.stack.get(mark).copied();
        self.stack.truncate(mark);
        Ok((count, first))
    }

    /// PROTO and FRAME.
    fn header(&mut self, o: &Op) -> Step {
        let n = self.number(o);
        if o.code == op::PROTO && n > 5 {
            return Err(o.invalid(format!("{n}: protocols 0 to 5 exist")));
        }
        if o.code == op::FRAME && n > (self.data.len() - self.pos) as u64 {
            return Err(Refusal::Truncated { at: o.at, what: format!("FRAME of {n} bytes past the end") });
        }
        Ok(())
    }

    /// MARK, POP, POP_MARK, DUP.
    fn shuffle(&mut self, o: &Op) -> Step {
        match o.code {
            op::MARK => {
                if self.marks.len() >= self.limit {
                    return Err(Refusal::Limit { at: o.at, what: format!("more than {} marks", self.limit) });
                }
                self.marks.push(self.stack.len());
            }
            // With nothing above the last mark, POP removes the mark (as `_pickle.c` does).
            op::POP if self.marks.last() == Some(&self.stack.len()) => {
                self.marks.pop();
            }
            op::POP => {
                self.pop(o)?;
            }
            op::POP_MARK => {
                self.pop_mark(o)?;
            }
            _ => {
                let top = self.top(o)?;
                self.push(top, o)?;
            }
        }
        Ok(())
    }

    /// PUT, BINPUT, LONG_BINPUT, MEMOIZE (the top value into the memo) and GET, BINGET,
    /// LONG_BINGET (a memo entry onto the stack).
    fn remember(&mut self, o: &Op) -> Step {
        let key = match o.code {
            // The next free index, as CPython numbers it.
            op::MEMOIZE => self.memo.len() as u64,
            op::PUT | op::GET => std::str::from_utf8(self.bytes(o))
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
                .ok_or_else(|| o.invalid("with an index that is not a non-negative number"))?,
            _ => self.number(o),
        };
        if matches!(o.code, op::GET | op::BINGET | op::LONG_BINGET) {
            let value = *self.memo.get(&key).ok_or_else(|| o.invalid(format!("{key}, which nothing was put in the memo under")))?;
            return self.push(value, o);
        }
        let value = self.top(o)?;
        if self.memo.len() >= self.limit && !self.memo.contains_key(&key) {
            return Err(Refusal::Limit { at: o.at, what: format!("more than {} memo entries", self.limit) });
        }
        self.memo.insert(key, value);
        Ok(())
    }

    /// GLOBAL, STACK_GLOBAL, INST (a name, which must be listed) and EXT1, EXT2, EXT4 (a name
    /// from copyreg's extension registry, which could be anything: refused).
    fn name(&mut self, o: &Op) -> Step {
        let (module, name) = match o.code {
            op::GLOBAL | op::INST => {
                let split = o.arg.start + self.bytes(o).iter().position(|&b| b == b'\n').unwrap_or(o.arg.len());
                (o.arg.start..split, (split + 1).min(o.arg.end)..o.arg.end)
            }
            op::STACK_GLOBAL => {
                let (name, module) = (self.pop(o)?, self.pop(o)?);
                match (module, name) {
                    (Value::Str { at: m, len: ml }, Value::Str { at: n, len: nl }) => {
                        let range = |at: u32, len: u16| at as usize..at as usize + usize::from(len);
                        (range(m, ml), range(n, nl))
                    }
                    _ => return Err(o.code("of a name not given as a string")),
                }
            }
            _ => return Err(o.code(format!("{} (copyreg's extension registry, which a weights file never needs)", self.number(o)))),
        };
        let data = self.data;
        let (module, name) = (&data[module], &data[name]);
        let index = lookup(module, name).ok_or_else(|| o.code(shown(module, name)))?;
        if o.code != op::INST {
            return self.push(Value::Global(index), o);
        }
        if !listed(index).1 {
            return Err(o.code(format!("{} (a name a weights file may refer to, never call)", dotted(index))));
        }
        self.pop_mark(o)?;
        self.push(Value::Made(index), o)
    }

    /// REDUCE, NEWOBJ, NEWOBJ_EX, OBJ (a call: of a listed callable only) and BUILD (state set on
    /// an object: only on one a listed callable made).
    fn call(&mut self, o: &Op) -> Step {
        let callee = match o.code {
            op::BUILD => {
                self.pop(o)?;
                return match self.top(o)? {
                    Value::Made(_) | Value::Tensor { .. } => Ok(()),
                    other => Err(o.code(format!("on {}, which no listed callable made", what(other)))),
                };
            }
            op::OBJ => self.pop_mark(o)?.1.ok_or_else(|| o.invalid("without a class"))?,
            op::REDUCE => {
                let args = self.pop(o)?;
                let callee = self.pop(o)?;
                if let Value::Global(i) = callee
                    && let Some(tensor) = self.tensor(i, args)
                {
                    return self.push(tensor, o);
                }
                callee
            }
            op::NEWOBJ => {
                self.pop(o)?;
                self.pop(o)?
            }
            // NEWOBJ_EX: keyword arguments, arguments, class.
            _ => {
                self.pop(o)?;
                self.pop(o)?;
                self.pop(o)?
            }
        };
        match callee {
            Value::Global(i) if listed(i).1 => self.push(Value::Made(i), o),
            Value::Global(i) => Err(o.code(format!("of {} (a name a weights file may refer to, never call)", dotted(i)))),
            other => Err(o.code(format!("of {}, which is no listed callable", what(other)))),
        }
    }

    /// APPEND, SETITEM (the top values) and APPENDS, SETITEMS, ADDITEMS (those above the mark):
    /// into the container below them, which a listed name is not.
    fn fill(&mut self, o: &Op) -> Step {
        match o.code {
            op::APPEND => {
                self.pop(o)?;
            }
            op::SETITEM => {
                let value = self.pop(o)?;
                let key = self.pop(o)?;
                self.note_key(key, value);
            }
            _ => {
                if o.code == op::SETITEMS {
                    let pairs: Vec<Value> = self.stack.get(self.fence()..).unwrap_or_default().to_vec();
                    for pair in pairs.chunks_exact(2) {
                        self.note_key(pair[0], pair[1]);
                    }
                }
                let (count, _) = self.pop_mark(o)?;
                if o.code == op::SETITEMS && count % 2 != 0 {
                    return Err(o.invalid("with an odd number of items"));
                }
            }
        }
        match self.top(o)? {
            Value::Global(i) => Err(o.code(format!("on {}, which is no container", dotted(i)))),
            _ => Ok(()),
        }
    }

    /// Records `key` when `value` is a tensor that a listed `_rebuild_*` function made.
    fn note_key(&mut self, key: Value, value: Value) {
        let Value::Str { at, len } = key else { return };
        match value {
            Value::Made(i) if listed(i).0.1.starts_with("_rebuild_") => self.keys.push((at, len)),
            Value::Tensor { view, .. } => {
                self.keys.push((at, len));
                if let Some(v) = self.views.get_mut(view as usize) {
                    v.name.get_or_insert((at, len));
                }
            }
            _ => {}
        }
    }

    /// LIST, TUPLE, DICT, FROZENSET (the values above the mark) and TUPLE1, TUPLE2, TUPLE3,
    /// BINPERSID, READONLY_BUFFER (the top ones): replaced by one new value.
    fn collect(&mut self, o: &Op) -> Step {
        let popped = match o.code {
            op::TUPLE1 | op::BINPERSID | op::READONLY_BUFFER => 1,
            op::TUPLE2 => 2,
            op::TUPLE3 => 3,
            _ => 0,
        };
        let items: Vec<Value> = match o.code {
            op::TUPLE => self.stack.get(self.fence()..).unwrap_or_default().to_vec(),
            op::TUPLE1 | op::TUPLE2 | op::TUPLE3 | op::BINPERSID => {
                self.stack.get(self.stack.len().saturating_sub(popped)..).unwrap_or_default().to_vec()
            }
            _ => Vec::new(),
        };
        if popped == 0 {
            if o.code == op::DICT {
                let pairs: Vec<Value> = self.stack.get(self.fence()..).unwrap_or_default().to_vec();
                for pair in pairs.chunks_exact(2) {
                    self.note_key(pair[0], pair[1]);
                }
            }
            let (count, _) = self.pop_mark(o)?;
            if o.code == op::DICT && count % 2 != 0 {
                return Err(o.invalid("with an odd number of items"));
            }
        }
        for _ in 0..popped {
            self.pop(o)?;
        }
        let value = match o.code {
            op::TUPLE | op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => self.tuple(items, o)?,
            op::BINPERSID => match items.as_slice() {
                [Value::Tuple(t)] => self.storage(*t),
                _ => Value::Other,
            },
            _ => Value::Other,
        };
        self.push(value, o)
    }
}

/// The longest tuple whose values the walk keeps (a tensor's arguments, shape and stride).
const MAX_TUPLE: usize = 16;

/// A storage's persistent id, `('storage', type, key, location, numel)`.
#[derive(Clone, Copy, Debug)]
struct StorageId {
    /// Where its key is in the pickle.
    key: (u32, u16),
    /// Its element count and the bytes of one element (1 for an untyped storage).
    numel: u64,
    element: u64,
}

/// A tensor the walk saw built: its storage (an index into the walk's storages) and view.
#[derive(Clone, Debug)]
struct ViewAt {
    storage: u32,
    element: u64,
    offset: u64,
    shape: Vec<u64>,
    stride: Vec<u64>,
    /// Where the first name it was set under is in the pickle.
    name: Option<(u32, u16)>,
}

/// A tensor as the pickle builds it: a view (offset, shape, stride, in elements) on a storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// The first name it is set under in its dict (`None`: set under none).
    pub name: Option<String>,
    /// Its storage's key, and the bytes the storage declares (`None`: beyond 2^64).
    pub storage: String,
    /// Bytes the storage declares: element count times element size.
    pub storage_bytes: Option<u64>,
    /// Bytes of one of the tensor's elements.
    pub element: u64,
    /// Offset, shape and stride, in elements.
    pub offset: u64,
    /// Extents, outermost first.
    pub shape: Vec<u64>,
    /// Steps, in elements.
    pub stride: Vec<u64>,
}

impl View {
    /// One past the last storage element the view reaches (0 for an empty tensor); `None`
    /// beyond 2^64.
    pub fn extent(&self) -> Option<u64> {
        if self.shape.contains(&0) {
            return Some(0);
        }
        self.shape.iter().zip(&self.stride).try_fold(self.offset.checked_add(1)?, |end, (&d, &s)| end.checked_add((d - 1).checked_mul(s)?))
    }

    /// The bytes of the storage a read of this tensor holds: from its offset to its extent.
    pub fn window_bytes(&self) -> Option<u64> {
        self.extent()?.saturating_sub(self.offset).checked_mul(self.element)
    }

    /// The name for a message.
    pub fn shown(&self) -> String {
        match &self.name {
            Some(n) => n.chars().flat_map(char::escape_debug).collect(),
            None => format!("(set under no name, on storage '{}')", self.storage),
        }
    }
}

/// The bytes of one element of a storage type or dtype `torch.<name>`; `None` for others.
fn element_size(index: u16) -> Option<u64> {
    let ((module, name), _) = listed(index);
    if !module.starts_with("torch") {
        return None;
    }
    let name = name.strip_suffix("Storage").unwrap_or(name);
    Some(match name {
        "Double" | "Long" | "ComplexFloat" | "float64" | "int64" | "uint64" | "complex64" => 8,
        "Float" | "Int" | "QInt32" | "float32" | "int32" | "uint32" | "qint32" | "complex32" => 4,
        "Half" | "BFloat16" | "Short" | "float16" | "bfloat16" | "int16" | "uint16" => 2,
        "ComplexDouble" | "complex128" => 16,
        "Char" | "Byte" | "Bool" | "QUInt8" | "QInt8" | "QUInt4x2" | "QUInt2x4" | "Untyped" | "int8" | "uint8" | "bool" | "qint8"
        | "quint8" | "quint4x2" | "quint2x4" => 1,
        n if n.starts_with("float8") => 1,
        _ => return None,
    })
}

/// A little-endian two's-complement integer of at most 8 bytes (LONG1's argument).
fn signed_le(bytes: &[u8]) -> Option<i64> {
    if bytes.len() > 8 {
        return None;
    }
    let negative = bytes.last().is_some_and(|&b| b & 0x80 != 0);
    let mut buf = [if negative { 0xff } else { 0 }; 8];
    buf[..bytes.len()].copy_from_slice(bytes);
    Some(i64::from_le_bytes(buf))
}

impl Walker<'_> {
    /// A tuple of `items`, kept when short enough to be a tensor's arguments.
    fn tuple(&mut self, items: Vec<Value>, o: &Op) -> Step<Value> {
        if items.len() > MAX_TUPLE {
            return Ok(Value::Other);
        }
        if self.tuple_values + items.len() + 1 > self.limit || self.tuples.len() >= u32::MAX as usize {
            return Err(Refusal::Limit { at: o.at, what: format!("more than {} values in its tuples", self.limit) });
        }
        self.tuple_values += items.len() + 1;
        self.tuples.push(items);
        Ok(Value::Tuple((self.tuples.len() - 1) as u32))
    }

    fn items(&self, value: Value) -> Option<&[Value]> {
        match value {
            Value::Tuple(t) => self.tuples.get(t as usize).map(Vec::as_slice),
            _ => None,
        }
    }

    /// The storage a persistent id tuple names, `('storage', type, key, location, numel, ...)`.
    fn storage(&mut self, id: u32) -> Value {
        let Some(&[Value::Str { .. }, Value::Global(kind), Value::Str { at, len }, _, Value::Int(numel), ..]) =
            self.tuples.get(id as usize).map(Vec::as_slice)
        else {
            return Value::Other;
        };
        match (element_size(kind), u64::try_from(numel)) {
            (Some(element), Ok(numel)) if self.storages.len() < u32::MAX as usize => {
                self.storages.push(StorageId { key: (at, len), numel, element });
                Value::Storage((self.storages.len() - 1) as u32)
            }
            _ => Value::Other,
        }
    }

    /// Non-negative integers of a tuple.
    fn dims(&self, value: Value) -> Option<Vec<u64>> {
        self.items(value)?.iter().map(|v| if let Value::Int(n) = v { u64::try_from(*n).ok() } else { None }).collect()
    }

    /// What calling the listed callable `callee` on `args` makes, when it is a tensor: a view
    /// for `_rebuild_tensor`, `_v2` and `_v3` (storage, offset, size, stride, ..., [dtype]); the
    /// same tensor for `_rebuild_parameter` (data, ...).
    fn tensor(&mut self, callee: u16, args: Value) -> Option<Value> {
        let ((module, name), _) = listed(callee);
        let args = self.items(args)?.to_vec();
        if module != "torch._utils" {
            return None;
        }
        if name.starts_with("_rebuild_parameter") {
            return match args.first() {
                Some(&Value::Tensor { view, .. }) => Some(Value::Tensor { made: callee, view }),
                _ => None,
            };
        }
        let [Value::Storage(storage), Value::Int(offset), shape, stride, rest @ ..] = args.as_slice() else { return None };
        let element = match (name, rest) {
            ("_rebuild_tensor" | "_rebuild_tensor_v2", _) => self.storages.get(*storage as usize)?.element,
            ("_rebuild_tensor_v3", [_, _, Value::Global(dtype), ..]) => element_size(*dtype)?,
            _ => return None,
        };
        let (shape, stride) = (self.dims(*shape)?, self.dims(*stride)?);
        if shape.len() != stride.len() || self.views.len() >= u32::MAX as usize {
            return None;
        }
        let offset = u64::try_from(*offset).ok()?;
        self.views.push(ViewAt { storage: *storage, element, offset, shape, stride, name: None });
        Some(Value::Tensor { made: callee, view: (self.views.len() - 1) as u32 })
    }
}

/// Refuses a view that reaches past its storage, and a storage that declares more bytes than
/// its entry holds (`entries`: the archive's entry sizes under `root`; `None` outside a ZIP).
/// Each error names the tensor.
fn check_views(path: &Path, views: &[View], entries: Option<(&str, &HashMap<String, u64>)>) -> Result<()> {
    for v in views {
        let tensor = format!("tensor {}", v.shown());
        let extent = v.extent().ok_or_else(|| Error::file(path, format!("{tensor}: its view reaches beyond 2^64 elements")))?;
        let held = v.storage_bytes.map(|b| b / v.element.max(1));
        if held.is_none_or(|h| extent > h) {
            return Err(Error::file(
                path,
                format!(
                    "{tensor}: its view (shape {:?}, stride {:?}, offset {}) reaches storage element {extent}, past the {} elements its storage '{}' holds: refused, nothing was read",
                    v.shape,
                    v.stride,
                    v.offset,
                    held.map_or("2^64".to_string(), |h| h.to_string()),
                    v.storage
                ),
            ));
        }
        if let Some((root, sizes)) = entries
            && let Some(&size) = sizes.get(&format!("{root}data/{}", v.storage))
            && v.storage_bytes.is_none_or(|b| b > size)
        {
            return Err(Error::file(
                path,
                format!(
                    "{tensor}: its storage '{}' declares {} bytes, but its ZIP entry {root}data/{} holds {size}: refused, nothing was read",
                    v.storage,
                    v.storage_bytes.map_or("more than 2^64".to_string(), |b| b.to_string()),
                    v.storage
                ),
            ));
        }
    }
    Ok(())
}

/// A value, for a message.
fn what(value: Value) -> String {
    match value {
        Value::Global(i) => dotted(i),
        Value::Made(i) | Value::Tensor { made: i, .. } => format!("what {} returned", dotted(i)),
        Value::Str { .. } => "a string".into(),
        Value::Int(_) | Value::Tuple(_) | Value::Storage(_) | Value::Other => "a value no listed name gave".into(),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::op::*;
    use super::*;

    /// Opcodes and their arguments, assembled by hand (pickletools' formats).
    #[derive(Clone, Default)]
    struct P(Vec<u8>);

    impl P {
        fn op(mut self, code: u8) -> Self {
            self.0.push(code);
            self
        }
        fn raw(mut self, bytes: &[u8]) -> Self {
            self.0.extend_from_slice(bytes);
            self
        }
        fn arg(self, code: u8, bytes: &[u8]) -> Self {
            self.op(code).raw(bytes)
        }
        fn proto(self, v: u8) -> Self {
            self.arg(PROTO, &[v])
        }
        fn global(self, module: &str, name: &str) -> Self {
            self.arg(GLOBAL, format!("{module}\n{name}\n").as_bytes())
        }
        fn text(self, s: &str) -> Self {
            self.arg(BINUNICODE, &(s.len() as u32).to_le_bytes()).raw(s.as_bytes())
        }
        fn short(self, s: &str) -> Self {
            self.arg(SHORT_BINUNICODE, &[s.len() as u8]).raw(s.as_bytes())
        }
        fn int(self, v: u8) -> Self {
            self.arg(BININT1, &[v])
        }
        fn put(self, i: u8) -> Self {
            self.arg(BINPUT, &[i])
        }
        fn get(self, i: u8) -> Self {
            self.arg(BINGET, &[i])
        }
        fn at(&self) -> usize {
            self.0.len()
        }
        fn stop(self) -> Vec<u8> {
            self.op(STOP).0
        }
    }

    /// A tensor as torch.save writes it at protocol 2: `_rebuild_tensor_v2(storage, 0, (2,),
    /// (1,), False, OrderedDict())`, the storage a persistent id.
    fn tensor(p: P, key: &str) -> P {
        p.global("torch._utils", "_rebuild_tensor_v2")
            .op(MARK)
            .op(MARK)
            .text("storage")
            .global("torch", "FloatStorage")
            .text(key)
            .text("cpu")
            .int(2)
            .op(TUPLE)
            .op(BINPERSID)
            .int(0)
            .int(2)
            .op(TUPLE1)
            .int(1)
            .op(TUPLE1)
            .op(NEWFALSE)
            .global("collections", "OrderedDict")
            .op(EMPTY_TUPLE)
            .op(REDUCE)
            .op(TUPLE)
            .op(REDUCE)
    }

    /// A state_dict's opening: PROTO 2, an OrderedDict, a tensor under `fc.weight`.
    fn opening() -> P {
        let p = P::default().proto(2).global("collections", "OrderedDict").op(EMPTY_TUPLE).op(REDUCE).put(0);
        tensor(p.text("fc.weight"), "0").arg(LONG_BINPUT, &[1, 0, 0, 0]).op(SETITEM)
    }

    /// The state_dict's `_metadata` attribute set by BUILD, and STOP.
    fn closing(p: P) -> Vec<u8> {
        p.op(EMPTY_DICT)
            .text("_metadata")
            .global("collections", "OrderedDict")
            .op(EMPTY_TUPLE)
            .op(REDUCE)
            .text("")
            .op(EMPTY_DICT)
            .text("version")
            .int(1)
            .op(SETITEM)
            .op(SETITEM)
            .op(SETITEM)
            .op(BUILD)
            .stop()
    }

    fn ok(bytes: &[u8]) {
        assert_eq!(walk(bytes, 0, MAX_ENTRIES), Ok(bytes.len()));
    }

    fn code(bytes: &[u8], at: usize, what: &str) {
        assert_eq!(walk(bytes, 0, MAX_ENTRIES), Err(Refusal::Code { at, what: what.into() }));
    }

    fn invalid(bytes: &[u8], at: usize, what: &str) {
        match walk(bytes, 0, MAX_ENTRIES) {
            Err(Refusal::Invalid { at: a, what: w } | Refusal::Truncated { at: a, what: w }) => assert_eq!((a, w.as_str()), (at, what)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_opcode_reads_exactly_its_argument() {
        let n = |v: u64, width: usize| v.to_le_bytes()[..width].to_vec();
        let counted = |width: usize, payload: &[u8]| [n(payload.len() as u64, width), payload.to_vec()].concat();
        let with_arg: Vec<(u8, Vec<u8>)> = vec![
            (FLOAT, b"1.5\n".to_vec()),
            (INT, b"7\n".to_vec()),
            (LONG, b"7L\n".to_vec()),
            (STRING, b"'ab'\n".to_vec()),
            (UNICODE, b"ab\n".to_vec()),
            (GET, b"0\n".to_vec()),
            (PUT, b"0\n".to_vec()),
            (PERSID, b"0\n".to_vec()),
            (GLOBAL, b"torch\nSize\n".to_vec()),
            (INST, b"torch\nSize\n".to_vec()),
            (BININT, n(7, 4)),
            (BININT1, n(7, 1)),
            (BININT2, n(7, 2)),
            (BINFLOAT, n(7, 8)),
            (BINGET, n(0, 1)),
            (LONG_BINGET, n(0, 4)),
            (BINPUT, n(0, 1)),
            (LONG_BINPUT, n(0, 4)),
            (PROTO, n(2, 1)),
            (EXT1, n(1, 1)),
            (EXT2, n(1, 2)),
            (EXT4, n(1, 4)),
            (FRAME, n(1, 8)),
            (BINSTRING, counted(4, b"abc")),
            (SHORT_BINSTRING, counted(1, b"abc")),
            (BINUNICODE, counted(4, b"abc")),
            (SHORT_BINUNICODE, counted(1, b"abc")),
            (BINUNICODE8, counted(8, b"abc")),
            (BINBYTES, counted(4, b"abc")),
            (SHORT_BINBYTES, counted(1, b"abc")),
            (BINBYTES8, counted(8, b"abc")),
            (BYTEARRAY8, counted(8, b"abc")),
            (LONG1, counted(1, &[0xff, 0x7f])),
            (LONG4, counted(4, &[0xff, 0x7f])),
        ];
        let described: Vec<u8> = (0..=255u8).filter(|&c| describe(c).is_some()).collect();
        assert_eq!(described.len(), 68, "protocols 0 to 5 have 68 opcodes");
        for &c in &described {
            let arg = with_arg.iter().find(|(o, _)| *o == c).map(|(_, a)| a.clone()).unwrap_or_default();
            let (name, layout) = describe(c).unwrap();
            assert_eq!(layout == Arg::Nothing, arg.is_empty(), "{name}");
            // The argument, then a byte it must not read.
            let bytes = [vec![c], arg.clone(), vec![STOP]].concat();
            let mut w = Walker::new(&bytes, 1, 8);
            w.argument(name, layout, 0).unwrap();
            assert_eq!(w.pos, bytes.len() - 1, "{name} read {} bytes of its {}-byte argument", w.pos - 1, arg.len());
            // One byte short, it is truncated, whatever its length claims.
            if !arg.is_empty() {
                let short = [vec![c], arg[..arg.len() - 1].to_vec()].concat();
                let mut w = Walker::new(&short, 1, 8);
                assert!(matches!(w.argument(name, layout, 0), Err(Refusal::Truncated { at: 0, .. })), "{name}");
            }
        }
    }

    #[test]
    fn what_torch_save_writes_passes() {
        // A state_dict at protocol 2 (the fixtures' opcodes): OrderedDict, tensors, _metadata.
        ok(&closing(opening()));
        // A training checkpoint: plain dicts and lists, floats, None, the memo's long forms.
        let p = P::default().proto(2).op(EMPTY_DICT).put(0).op(MARK).text("epoch").arg(BININT2, &[44, 1]).text("best_acc");
        let p = p.arg(BINFLOAT, &0.9f64.to_be_bytes()).text("model_state_dict");
        let p = tensor(p.global("collections", "OrderedDict").op(EMPTY_TUPLE).op(REDUCE).arg(LONG_BINPUT, &[0, 1, 0, 0]).text("w"), "0");
        let p = p.op(SETITEM).text("optimizer_state_dict").op(EMPTY_DICT).text("param_groups").op(EMPTY_LIST).op(EMPTY_DICT);
        let p = p.text("params").op(EMPTY_LIST).op(MARK).int(0).int(1).op(APPENDS).op(SETITEM).text("nesterov").op(NONE).op(SETITEM);
        let p = p.op(APPEND).op(SETITEM).text("step").arg(BININT, &[1, 0, 0, 0]).arg(LONG_BINGET, &[0, 1, 0, 0]).op(POP).op(SETITEM);
        ok(&p.op(SETITEMS).stop());
        // Protocol 4: frames, MEMOIZE, STACK_GLOBAL (also of names from the memo), sets, NEWOBJ.
        let p = P::default().proto(4).arg(FRAME, &n8(60)).op(EMPTY_DICT).op(MEMOIZE).op(MARK).short("shape");
        let p = p.short("torch").op(MEMOIZE).short("Size").op(STACK_GLOBAL).op(MEMOIZE).int(2).int(3).op(TUPLE2).op(TUPLE1).op(REDUCE);
        let p = p.short("tags").op(EMPTY_SET).op(MARK).short("a").arg(LONG1, &[1, 5]).op(ADDITEMS).short("frozen").op(MARK).int(1);
        let p = p.op(FROZENSET).short("size").get(1).short("Size").op(STACK_GLOBAL).op(EMPTY_TUPLE).op(NEWOBJ).short("od");
        let p = p.short("collections").short("OrderedDict").op(STACK_GLOBAL).op(EMPTY_TUPLE).op(EMPTY_DICT).op(NEWOBJ_EX);
        let p = p.short("blob").arg(BINBYTES8, &[n8(2), vec![1, 2]].concat()).short("buf").arg(BYTEARRAY8, &[n8(1), vec![7]].concat());
        let p = p.short("view").op(NEXT_BUFFER).op(READONLY_BUFFER).short("t3").op(NONE).op(NEWTRUE).op(NEWFALSE).op(TUPLE3);
        ok(&p.op(SETITEMS).stop());
        // numpy scalars (a checkpoint's best_acc): numpy 1 at protocol 2, numpy 2 at protocol 4.
        let p = P::default().proto(2).global("numpy.core.multiarray", "scalar").global("numpy", "dtype").text("f8").op(NEWFALSE);
        let p = p.op(NEWTRUE).op(TUPLE3).op(REDUCE).op(MARK).int(3).text("<").op(NONE).op(NONE).op(NONE).arg(BININT, &[255; 4]);
        let p = p.arg(BININT, &[255; 4]).int(0).op(TUPLE).op(BUILD).global("_codecs", "encode").text("\u{9a}\u{99}").text("latin1");
        ok(&p.op(TUPLE2).op(REDUCE).op(TUPLE2).op(REDUCE).stop());
        let p = P::default().proto(4).short("numpy._core.multiarray").short("scalar").op(STACK_GLOBAL).short("numpy").short("dtype");
        let p = p.op(STACK_GLOBAL).short("f8").op(NEWFALSE).op(NEWTRUE).op(TUPLE3).op(REDUCE).arg(SHORT_BINBYTES, &[2, 0, 0]);
        ok(&p.op(TUPLE2).op(REDUCE).stop());
        // An array: numpy's _reconstruct of numpy.ndarray, then its state by BUILD.
        let p = P::default().proto(2).global("numpy.core.multiarray", "_reconstruct").global("numpy", "ndarray").int(0).op(TUPLE1);
        let p = p.arg(SHORT_BINSTRING, b"\x01b").op(TUPLE3).op(REDUCE).op(MARK).int(1).int(0).op(TUPLE1).op(NONE).op(NEWFALSE);
        ok(&p.op(EMPTY_LIST).op(TUPLE).op(BUILD).stop());
        // Protocol 0: text opcodes, the memo by PUT and GET, marks, Python 2's __builtin__, INST.
        let p = P::default().op(MARK).raw(b"I1\nL2L\nF0.5\nS'x'\nVy\n").op(LIST).raw(b"p0\n").op(POP).raw(b"g0\n").op(DUP);
        let p = p.raw(b"I3\n").op(APPEND).op(POP).op(MARK).raw(b"I4\n").op(POP_MARK).op(MARK).raw(b"S'k'\nI5\n").op(DICT);
        let p = p.raw(b"S'k2'\nPstorage0\n").op(SETITEM).raw(b"c__builtin__\nset\n").op(MARK).op(LIST).op(TUPLE1).op(REDUCE);
        let p = p.op(POP).op(MARK).raw(b"icollections\nOrderedDict\n").op(EMPTY_DICT).op(BUILD).op(POP).op(MARK).raw(b"ctorch\nSize\n");
        ok(&p.op(MARK).op(TUPLE).op(OBJ).op(POP).op(MARK).op(MARK).op(POP).op(TUPLE).op(TUPLE3).stop());
    }

    fn n8(v: u64) -> Vec<u8> {
        v.to_le_bytes().to_vec()
    }

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pytorch").join(name)
    }

    #[test]
    fn the_fixtures_pass_and_the_code_fixture_is_refused_where_it_names_posix_system() {
        check(&fixture("resnet8.pt")).unwrap();
        check(&fixture("resnet8-train.pt")).unwrap();
        let e = check(&fixture("code.pt")).unwrap_err().to_string();
        assert!(e.contains("(GLOBAL posix.system at byte ") && e.contains(" of code/data.pkl)"), "{e}");
        assert!(e.ends_with("(nothing was run)") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn views_are_read_from_the_pickle_and_held_to_their_storage_and_its_entry() {
        let (_, keys, views) = walk_views(&closing(opening()), 0, MAX_ENTRIES).unwrap();
        assert_eq!(keys, ["fc.weight"]);
        let fc = View {
            name: Some("fc.weight".into()),
            storage: "0".into(),
            storage_bytes: Some(8),
            element: 4,
            offset: 0,
            shape: vec![2],
            stride: vec![1],
        };
        assert_eq!(views, std::slice::from_ref(&fc));
        assert_eq!((fc.extent(), fc.window_bytes()), (Some(2), Some(8)));
        let path = Path::new("w.pt");
        let entry = |size: u64| HashMap::from([("archive/data/0".to_string(), size)]);
        check_views(path, &views, Some(("archive/", &entry(8)))).unwrap();
        // A view past its storage, a storage past its entry: refused, naming the tensor.
        let e = check_views(path, &[View { offset: 1, ..fc.clone() }], None).unwrap_err().to_string();
        let want = "w.pt: tensor fc.weight: its view (shape [2], stride [1], offset 1) reaches storage element 3, past the 2 elements its storage '0' holds";
        assert!(e.starts_with(want), "{e}");
        let e = check_views(path, &views, Some(("archive/", &entry(4)))).unwrap_err().to_string();
        assert!(e.contains("tensor fc.weight: its storage '0' declares 8 bytes, but its ZIP entry archive/data/0 holds 4"), "{e}");
        // torch.zeros(1).expand(n) reaches one element, whatever n; an empty tensor none; a
        // scalar its offset's.
        let expanded = View { shape: vec![2_400_000_000], stride: vec![0], ..fc.clone() };
        assert_eq!((expanded.extent(), expanded.window_bytes()), (Some(1), Some(4)));
        assert_eq!(View { shape: vec![3, 0], stride: vec![0, 1], ..fc.clone() }.extent(), Some(0));
        assert_eq!(View { shape: vec![], stride: vec![], offset: 1, ..fc.clone() }.extent(), Some(2));
        assert_eq!(View { shape: vec![3, 1 << 40], stride: vec![1 << 40, 1 << 40], ..fc.clone() }.extent(), None);
        // A parameter wraps its tensor; protocol 2's LONG1 and BININT carry large and negative
        // numbers.
        let p = P::default().proto(2).op(EMPTY_DICT).text("w").global("torch._utils", "_rebuild_parameter").op(MARK);
        let p = tensor(p, "7").op(NEWFALSE).op(TUPLE).op(REDUCE).op(SETITEM);
        let (_, _, views) = walk_views(&p.stop(), 0, MAX_ENTRIES).unwrap();
        assert_eq!((views[0].name.as_deref(), views[0].storage.as_str()), (Some("w"), "7"));
        assert_eq!(signed_le(&[0x00, 0x18, 0x0d, 0x8f, 0x00]), Some(2_400_000_000));
        assert_eq!(signed_le(&[0xff]), Some(-1));
        assert_eq!(signed_le(&[0; 9]), None);
    }

    #[test]
    fn names_outside_the_lists_are_refused_where_they_appear() {
        // A call whose result is popped leaves no trace in the parsed state_dict.
        for (module, name) in [("posix", "system"), ("builtins", "eval"), ("__builtin__", "eval"), ("nt", "system")] {
            let p = opening();
            let at = p.at();
            let bytes = closing(p.global(module, name).text("true").op(TUPLE1).op(REDUCE).op(POP));
            // Named as the pickle names it (Python 2's `__builtin__` too).
            code(&bytes, at, &format!("GLOBAL {module}.{name}"));
        }
        // Names that start like listed ones, or spell one across module and name, are not listed.
        for (module, name) in [
            ("torch.serialization", "load"),
            ("torch", "load"),
            ("torch._utils", "_rebuild_tensor_v2x"),
            ("torch", "_utils._rebuild_tensor_v2"),
            ("collections", "OrderedDict.fromkeys"),
            ("numpy.testing._private.utils", "runstring"),
            ("numpy", "load"),
            ("builtins", "getattr"),
            ("_codecs", "decode"),
        ] {
            code(&P::default().proto(2).global(module, name).stop(), 2, &format!("GLOBAL {module}.{name}"));
        }
        // Protocol 4: the name comes from strings on the stack, or from the memo.
        let p = P::default().proto(4).op(EMPTY_DICT).short("x").short("builtins").short("eval");
        code(&p.clone().op(STACK_GLOBAL).short("0").op(TUPLE1).op(REDUCE).op(SETITEM).stop(), 22, "STACK_GLOBAL builtins.eval");
        let p = P::default().proto(4).short("posix").op(MEMOIZE).short("system").op(MEMOIZE).op(POP).op(POP).get(0).get(1);
        code(&p.op(STACK_GLOBAL).stop(), 25, "STACK_GLOBAL posix.system");
        let p = P::default().proto(4).int(1).short("eval").op(STACK_GLOBAL).stop();
        code(&p, 10, "STACK_GLOBAL of a name not given as a string");
        let long = "x".repeat(MAX_NAME + 1);
        code(&P::default().text(&long).short("eval").op(STACK_GLOBAL).stop(), 268, "STACK_GLOBAL of a name not given as a string");
        // An escaped protocol-0 string is no name, whatever it decodes to.
        code(&P::default().raw(b"V\\u0070osix\nVsystem\n").op(STACK_GLOBAL).stop(), 20, "STACK_GLOBAL of a name not given as a string");
        // INST names its class in its argument; a control character is shown escaped.
        code(&P::default().op(MARK).raw(b"iposix\nsystem\n").stop(), 1, "INST posix.system");
        code(&P::default().short("a\tb").short("c").op(STACK_GLOBAL).stop(), 8, "STACK_GLOBAL a\\tb.c");
        // The copyreg extension registry can name anything.
        code(&P::default().arg(EXT1, &[1]).stop(), 0, "EXT1 1 (copyreg's extension registry, which a weights file never needs)");
        code(&P::default().arg(EXT2, &[1, 1]).stop(), 0, "EXT2 257 (copyreg's extension registry, which a weights file never needs)");
        code(
            &P::default().arg(EXT4, &[0, 0, 1, 0]).stop(),
            0,
            "EXT4 65536 (copyreg's extension registry, which a weights file never needs)",
        );
    }

    #[test]
    fn only_listed_callables_are_called_and_only_what_they_made_takes_state() {
        let never = "(a name a weights file may refer to, never call)";
        // `p` then `last`, refused at `last` with `what`.
        let refused_at = |p: P, last: P, what: &str| {
            let at = p.at() + last.at() - 1;
            code(&P(p.0).raw(&last.0).stop(), at, what);
        };
        let storage = P::default().proto(2).global("torch", "FloatStorage");
        let call = |code: u8| P::default().op(EMPTY_TUPLE).op(code);
        refused_at(storage.clone(), call(REDUCE), &format!("REDUCE of torch.FloatStorage {never}"));
        refused_at(storage.clone(), call(NEWOBJ), &format!("NEWOBJ of torch.FloatStorage {never}"));
        let dtype = P::default().proto(4).short("torch").short("float32").op(STACK_GLOBAL);
        refused_at(dtype, P::default().op(EMPTY_TUPLE).op(EMPTY_DICT).op(NEWOBJ_EX), &format!("NEWOBJ_EX of torch.float32 {never}"));
        refused_at(P::default().op(MARK).raw(b"cnumpy\nndarray\n"), P::default().op(OBJ), &format!("OBJ of numpy.ndarray {never}"));
        code(&P::default().op(MARK).raw(b"itorch\nTensor\n").stop(), 1, &format!("INST torch.Tensor {never}"));
        // What a listed callable returned is not itself callable, nor is plain data.
        let made = P::default().proto(2).global("collections", "OrderedDict").op(EMPTY_TUPLE).op(REDUCE);
        refused_at(made.clone(), call(REDUCE), "REDUCE of what collections.OrderedDict returned, which is no listed callable");
        refused_at(P::default().op(EMPTY_DICT), call(REDUCE), "REDUCE of a value no listed name gave, which is no listed callable");
        refused_at(P::default().short("os"), call(REDUCE), "REDUCE of a string, which is no listed callable");
        // BUILD sets state only on what a listed callable made.
        ok(&made.clone().op(EMPTY_DICT).op(BUILD).stop());
        let build = P::default().op(EMPTY_DICT).op(BUILD);
        refused_at(P::default().op(EMPTY_LIST), build.clone(), "BUILD on a value no listed name gave, which no listed callable made");
        refused_at(storage.clone(), build, "BUILD on torch.FloatStorage, which no listed callable made");
        // Items go into containers, never into a listed name.
        refused_at(storage, P::default().int(1).int(2).op(SETITEM), "SETITEM on torch.FloatStorage, which is no container");
        let set = P::default().global("builtins", "set");
        refused_at(set, P::default().op(MARK).int(1).op(ADDITEMS), "ADDITEMS on builtins.set, which is no container");
    }

    #[test]
    fn malformed_streams_are_not_valid_pickles_at_their_offset() {
        invalid(&P::default().proto(2).op(0xff).stop(), 2, "unknown opcode 0xff");
        invalid(&P::default().proto(6).stop(), 0, "PROTO 6: protocols 0 to 5 exist");
        invalid(&P::default().op(NONE).0, 1, "end without STOP");
        invalid(&P::default().op(STOP).0, 0, "STOP with too few values on the stack (stack underflow)");
        invalid(&P::default().op(NONE).op(MARK).stop(), 2, "STOP with too few values on the stack (stack underflow)");
        invalid(&P::default().op(NONE).op(MARK).op(APPEND).stop(), 2, "APPEND with too few values on the stack (stack underflow)");
        invalid(&P::default().op(EMPTY_DICT).int(1).op(SETITEM).stop(), 3, "SETITEM with too few values on the stack (stack underflow)");
        invalid(&P::default().op(POP).stop(), 0, "POP with too few values on the stack (stack underflow)");
        invalid(&P::default().op(NONE).op(POP_MARK).stop(), 1, "POP_MARK without a MARK");
        invalid(&P::default().op(MARK).op(OBJ).stop(), 1, "OBJ without a class");
        invalid(&P::default().op(MARK).int(1).op(DICT).stop(), 3, "DICT with an odd number of items");
        invalid(&P::default().op(EMPTY_DICT).op(MARK).int(1).op(SETITEMS).stop(), 4, "SETITEMS with an odd number of items");
        invalid(&P::default().get(3).stop(), 0, "BINGET 3, which nothing was put in the memo under");
        invalid(&P::default().op(NONE).raw(b"px\n").stop(), 1, "PUT with an index that is not a non-negative number");
        invalid(&P::default().op(NONE).raw(b"p-1\n").stop(), 1, "PUT with an index that is not a non-negative number");
        invalid(&P::default().raw(b"Sabc\n").stop(), 0, "STRING with an unquoted argument");
        invalid(&P::default().raw(b"S'abc\"\n").stop(), 0, "STRING with an unquoted argument");
        invalid(&P::default().arg(BINSTRING, &[0, 0, 0, 0x80]).stop(), 0, "BINSTRING with a negative length");
        invalid(&P::default().arg(LONG4, &[0xff; 4]).stop(), 0, "LONG4 with a negative length");
        invalid(&P::default().arg(FRAME, &n8(100)).stop(), 0, "FRAME of 100 bytes past the end");
        // Lengths are checked against what is left before anything is read or allocated.
        invalid(&P::default().proto(4).arg(BINUNICODE, &[0xff; 4]).stop(), 2, "BINUNICODE with a truncated argument");
        invalid(&P::default().arg(BINBYTES8, &[0xff; 8]).stop(), 0, "BINBYTES8 with a truncated argument");
        invalid(&P::default().arg(BYTEARRAY8, &n8(u64::MAX - 3)).stop(), 0, "BYTEARRAY8 with a truncated argument");
        invalid(&P::default().arg(BINUNICODE8, &[1, 2]).0, 0, "BINUNICODE8 with a truncated length");
        invalid(&P::default().raw(b"ctorch\nSize").0, 0, "GLOBAL with a truncated argument");
    }

    #[test]
    fn the_stack_the_marks_and_the_memo_are_bounded() {
        let limit = |bytes: &[u8]| walk(bytes, 0, 4);
        assert!(limit(&P::default().op(NONE).op(NONE).op(NONE).op(NONE).op(TUPLE3).stop()).is_ok());
        let five = P::default().op(NONE).op(NONE).op(NONE).op(NONE).op(NONE).stop();
        assert_eq!(limit(&five), Err(Refusal::Limit { at: 4, what: "more than 4 values on its stack".into() }));
        let marks = P::default().op(MARK).op(MARK).op(MARK).op(MARK).op(MARK).stop();
        assert_eq!(limit(&marks), Err(Refusal::Limit { at: 4, what: "more than 4 marks".into() }));
        let memo = |p: P| (0..5).fold(p, |p, i| p.put(i));
        assert_eq!(limit(&memo(P::default().op(NONE)).stop()), Err(Refusal::Limit { at: 9, what: "more than 4 memo entries".into() }));
        // Putting under a key already held takes no more room.
        let again = (0..9).fold(P::default().op(NONE), |p, _| p.put(1));
        assert!(limit(&again.stop()).is_ok());
    }

    /// A ZIP laid out as torch.save writes one, with `pickles` as its `data.pkl` entries.
    fn zip_file(dir: &Path, name: &str, pickles: &[(&str, &[u8])], method: zip::CompressionMethod) -> std::path::PathBuf {
        let path = dir.join(name);
        let mut z = zip::ZipWriter::new(File::create(&path).unwrap());
        let options = zip::write::SimpleFileOptions::default().compression_method(method);
        for (entry, bytes) in pickles {
            z.start_file(*entry, options).unwrap();
            z.write_all(bytes).unwrap();
        }
        for (entry, bytes) in [("archive/byteorder", &b"little"[..]), ("archive/data/0", &[0; 8]), ("archive/version", b"3\n")] {
            z.start_file(entry, options).unwrap();
            z.write_all(bytes).unwrap();
        }
        z.finish().unwrap();
        path
    }

    #[test]
    fn each_container_has_its_pickles_walked() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let good = closing(opening());
        let p = opening();
        let at = p.at();
        let bad = closing(p.global("posix", "system").text("true").op(TUPLE1).op(REDUCE).op(POP));
        let stored = zip::CompressionMethod::Stored;
        check(&zip_file(d, "good.pt", &[("archive/data.pkl", &good)], stored)).unwrap();
        check(&zip_file(d, "deflated.pt", &[("archive/data.pkl", &good)], zip::CompressionMethod::Deflated)).unwrap();
        let e = check(&zip_file(d, "bad.pt", &[("archive/data.pkl", &bad)], stored)).unwrap_err().to_string();
        assert!(e.contains(&format!("(GLOBAL posix.system at byte {at} of archive/data.pkl)")), "{e}");
        let e = check(&zip_file(d, "two.pt", &[("archive/data.pkl", &good), ("evil/data.pkl", &bad)], stored)).unwrap_err().to_string();
        assert!(e.contains("holds 2 data.pkl entries (evil/data.pkl, archive/data.pkl)"), "{e}");
        let e = check(&zip_file(d, "none.pt", &[("archive/mydata.pkl", &good)], stored)).unwrap_err().to_string();
        assert!(e.contains("is not a readable PyTorch file: its ZIP archive holds no data.pkl"), "{e}");
        // A legacy stream: five pickles, then the storages' raw bytes.
        let magic = P::default().proto(2).arg(LONG1, &[10]).raw(&LEGACY_MAGIC_BYTES).stop();
        let header =
            [magic, P::default().proto(2).arg(BININT2, &[0xe9, 0x03]).stop(), P::default().proto(2).op(EMPTY_DICT).stop()].concat();
        let keys = P::default().proto(2).op(EMPTY_LIST).text("0").op(APPEND).stop();
        let legacy = |object: &[u8]| [header.clone(), object.to_vec(), keys.clone(), vec![2, 0, 0, 0, 0, 0, 0, 0], vec![0; 8]].concat();
        let path = d.join("legacy.pt");
        std::fs::write(&path, legacy(&good)).unwrap();
        check(&path).unwrap();
        std::fs::write(&path, legacy(&bad)).unwrap();
        let e = check(&path).unwrap_err().to_string();
        let want = format!("(GLOBAL posix.system at byte {} of the file (pickle 4 of 5: the saved object))", header.len() + at);
        assert!(e.contains(&want), "{e}");
        // A plain pickle, read on past the first read when it is longer.
        std::fs::write(&path, &bad).unwrap();
        assert!(check(&path).unwrap_err().to_string().contains(&format!("(GLOBAL posix.system at byte {at} of the file)")));
        let big = P::default().proto(4).arg(BINBYTES8, &n8(3 << 20)).raw(&vec![0; 3 << 20]).stop();
        std::fs::write(&path, &big).unwrap();
        check(&path).unwrap();
        std::fs::write(&path, &big[..big.len() - 1]).unwrap();
        let e = check(&path).unwrap_err().to_string();
        assert!(e.ends_with(&format!(
            "is not a readable PyTorch file: not a valid pickle (end without STOP at byte {} of the file)",
            big.len() - 1
        )));
        // TAR (PyTorch before 0.1.10) and anything else.
        let mut tar = vec![0; 512];
        tar[257..262].copy_from_slice(b"ustar");
        std::fs::write(&path, &tar).unwrap();
        assert!(check(&path).unwrap_err().to_string().ends_with("which resilab does not read: re-save it with a current torch.save"));
        std::fs::write(&path, b"not a checkpoint\n").unwrap();
        assert!(check(&path).unwrap_err().to_string().ends_with("is not a readable PyTorch file: no ZIP, legacy or pickle header found"));
    }
}
