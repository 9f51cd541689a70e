"""`ServiceRecords` on PostgreSQL: a login role per service and database, with privileges on
exactly the service's tables.

Trusted setup (`provision_role`, on the store's own connection) creates the role, sets its
password and grants it the declared tables; the capability then logs in as that role on its own
connections, so the server refuses anything else (``permission denied``). The role's name is
derived from the database name, the store's schema and the service (unique across the databases
and schemas of one cluster, so two stores in one database never share, or re-password, a role);
its password is derived from the store's secret, so every process sharing the store logs in
without the password being stored or sent anywhere but in a SCRAM verifier computed here. The
role's sessions pin ``search_path`` to the store's schema: its unqualified table names resolve
to the store's tables, whatever the role's own default search path would find.

Inside a read tool's call (`toolgate.store.handler_access`) every unit of work is ``READ ONLY``,
so the server refuses any write. The role may write its own tables, so nothing the handler sends
may undo that (`_GuardedTx`): each statement goes to the server alone (a text of several is
refused whole), and only reads and writes of tables are sent (no transaction control, no session
state a pooled connection would carry into the next unit of work); a read unit of work takes its
snapshot with its BEGIN, after which the server refuses to make it READ WRITE. A service whose
reads append by design
(`RecordsScope.read_appends`) has a second login role for those calls, with SELECT on its tables
and INSERT on exactly those (`grants`).
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import hmac
import os
import re
import secrets
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row

from toolgate.errors import CapabilityDenied, ConfigurationError, StoreError
from toolgate.store.base import Tx
from toolgate.store.handler_access import unit_of_work
from toolgate.store.keys import Keyring
from toolgate.store.postgres import PostgresStore, redact_url
from toolgate.store.records_expiry import OpenUnit
from toolgate.store.records_scope import RecordsScope, ServiceRecords, records_denied

_ROLE_LOCK = 0x7467_0010
"""Advisory lock serializing role provisioning in one database (role names are per database)."""
_DENIED_ON = re.compile(r"permission denied for (?:table|relation|view|sequence) \"?([A-Za-z0-9_]+)")
_WRITTEN = re.compile(
    r"\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|MERGE\s+INTO|TRUNCATE(?:\s+TABLE)?)\s+(?:ONLY\s+)?"
    r"\"?([A-Za-z_][A-Za-z0-9_]{0,62})\"?(?![A-Za-z0-9_.])",
    re.IGNORECASE,
)
"""The table a plain write statement names: what a refusal in a READ ONLY transaction names (the
server's message names only the kind of statement)."""


def database_name(conninfo: str) -> str:
    """The database ``conninfo`` connects to, by libpq's defaults when it names none."""
    params = conninfo_to_dict(conninfo)
    user = params.get("user") or os.environ.get("PGUSER") or getpass.getuser()
    return str(params.get("dbname") or os.environ.get("PGDATABASE") or user)


def role_name(database: str, service: str, schema: str = "public", *, reads: bool = False) -> str:
    """``tg_sor_<service>_<hash of database, schema and service>``: at most 63 bytes, one per
    database and schema (a store in ``public`` keeps the name it had before schemas counted).
    ``reads``: the service's second role, for read calls of a service whose reads append
    (``tg_sor_<service>_rd_<hash>``, its own hash)."""
    key = f"{database}\0{service}" if schema == "public" else f"{database}\0{schema}\0{service}"
    if reads:
        digest = hashlib.sha256(f"{key}\0reads".encode()).hexdigest()[:16]
        return f"tg_sor_{service[:35]}_rd_{digest}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"tg_sor_{service[:38]}_{digest}"


def store_schema(store: PostgresStore) -> str:
    """The schema the store's tables live in (its sessions' ``current_schema()``), asked once
    per store: every session of it connects with the same URL, so the answer never changes."""
    if store._records_schema is None:
        with store.transaction(write=False) as tx:
            store._records_schema = _schema(tx)
    return store._records_schema


def role_password(keys: Keyring, database: str, role: str) -> str:
    """The role's password, derived from the store's secret (never stored, never logged)."""
    label = f"toolgate/service-records-role/v1\0{database}\0{role}".encode()
    return hmac.digest(keys.secret, label, "sha256").hex()


def scram_verifier(password: str, iterations: int = 4096) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores: the server never sees the password itself."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    stored = hashlib.sha256(hmac.digest(salted, b"Client Key", "sha256")).digest()
    server = hmac.digest(salted, b"Server Key", "sha256")
    b64 = lambda raw: base64.b64encode(raw).decode()  # noqa: E731
    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored)}:{b64(server)}"


def grants(scope: RecordsScope, *, reads: bool = False) -> tuple[tuple[str, frozenset[str]], ...]:
    """The privileges of the service's role on its tables; ``reads``: of its role for read calls
    (SELECT, and INSERT on the tables its reads append to)."""
    if reads:
        return (("SELECT, INSERT", scope.read_appends), ("SELECT", scope.readable - scope.read_appends))
    return (("SELECT, INSERT, UPDATE, DELETE", scope.tables), ("SELECT", scope.reads))


def provision_role(store: PostgresStore, scope: RecordsScope) -> None:
    """Create or update the role of ``scope`` (and, when its reads append, its role for read
    calls) and grant it exactly the scope's existing tables.

    Serialized per database by an advisory lock; a concurrent creation elsewhere is retried once."""
    database, schema = database_name(store._conninfo), store_schema(store)
    for reads in (False, True) if scope.read_appends else (False,):
        role = role_name(database, scope.name, schema, reads=reads)
        _provision_once(store, role, scope, grants(scope, reads=reads), database)


def _provision_once(
    store: PostgresStore,
    role: str,
    scope: RecordsScope,
    privileges: tuple[tuple[str, frozenset[str]], ...],
    database: str,
) -> None:
    verifier = scram_verifier(role_password(store.keys, database, role))
    for attempt in (1, 2):
        try:
            with store.transaction() as tx:
                _provision(tx, role, verifier, scope, privileges)
            return
        except StoreError as exc:
            if isinstance(exc.__cause__, psycopg.errors.DuplicateObject) and attempt == 1:
                continue
            if isinstance(exc.__cause__, psycopg.errors.InsufficientPrivilege):
                raise ConfigurationError(
                    f"cannot provision the PostgreSQL role {role} for {scope.name}'s tables: "
                    "the store's user needs CREATEROLE and ownership of the tables"
                ) from None
            raise


_HAS_USAGE = (
    "SELECT EXISTS (SELECT 1 FROM pg_namespace n, aclexplode(n.nspacl) a"
    " WHERE n.nspname = current_schema() AND a.privilege_type = 'USAGE'"
    " AND a.grantee = (SELECT oid FROM pg_roles WHERE rolname = ?)) AS direct"
)
"""Whether the role was granted USAGE on the store's schema itself (not through PUBLIC)."""
_HELD = (
    "WITH r AS (SELECT oid FROM pg_roles WHERE rolname = ?)"
    " SELECT c.relname, c.relkind = 'S' AS is_sequence, a.privilege_type AS privilege,"
    " a.is_grantable AS grantable, false AS on_column"
    " FROM r, pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, aclexplode(c.relacl) a"
    " WHERE n.nspname = current_schema() AND a.grantee = r.oid"
    " UNION ALL SELECT c.relname, false, a.privilege_type, a.is_grantable, true"
    " FROM r, pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " JOIN pg_attribute t ON t.attrelid = c.oid, aclexplode(t.attacl) a"
    " WHERE n.nspname = current_schema() AND a.grantee = r.oid"
)
"""Every privilege the role holds in the store's schema, on relations and on columns."""


def _provision(
    tx: Tx, role: str, verifier: str, scope: RecordsScope, privileges: tuple[tuple[str, frozenset[str]], ...]
) -> None:
    tx.execute(f"SELECT pg_advisory_xact_lock({_ROLE_LOCK})")
    me = tx.one("SELECT rolname, rolsuper OR rolcreaterole AS can FROM pg_roles WHERE rolname = current_user")
    assert me is not None
    found = tx.one(
        "SELECT rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication OR rolbypassrls AS wide,"
        " EXISTS (SELECT 1 FROM pg_auth_members m WHERE m.member = r.oid) AS member"
        " FROM pg_roles r WHERE rolname = ?",
        (role,),
    )
    if found is None and not me["can"]:
        raise ConfigurationError(
            f"PostgreSQL user {me['rolname']} cannot create roles: grant it CREATEROLE "
            f"(toolgate creates the LOGIN role {role} for {scope.name}'s tables)"
        )
    if found is not None and (found["wide"] or found["member"]):
        raise ConfigurationError(
            f"PostgreSQL role {role} has more than table privileges: drop it and rerun setup"
        )
    # the verifier is base64 and '$:' only: safe as a literal; the role name is ours
    if found is None:
        tx.execute(f"CREATE ROLE \"{role}\" LOGIN NOINHERIT PASSWORD '{verifier}'")
    elif me["can"]:
        tx.execute(f"ALTER ROLE \"{role}\" LOGIN NOINHERIT PASSWORD '{verifier}'")
    schema = _schema(tx)
    usage = tx.one(_HAS_USAGE, (role,))
    if usage is None or not usage["direct"]:  # public grants it to all; other schemas do not
        tx.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
    existing = {
        row["relname"]
        for row in tx.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND c.relname = ANY(?)",
            (sorted(scope.readable),),
        )
    }
    wanted = {
        (table, privilege)
        for granted, tables in privileges
        for table in tables & existing
        for privilege in granted.split(", ")
    }
    held = list(tx.execute(_HELD, (role,)))
    extra = any(r["on_column"] or r["grantable"] for r in held)  # column grants, grant options
    if extra or {(r["relname"], r["privilege"]) for r in held} != wanted:
        # only the relations the role holds something on are revoked: a REVOKE ... ON ALL TABLES
        # IN SCHEMA rewrites every relation's catalog row, and another process's schema change
        # (the checkpointer's setup altering its tables) then fails with "tuple concurrently updated"
        for kind, sequence in (("TABLE", False), ("SEQUENCE", True)):
            listed = sorted({r["relname"] for r in held if r["is_sequence"] == sequence})
            if listed:
                names = ", ".join('"' + t.replace('"', '""') + '"' for t in listed)  # any name: quoted
                tx.execute(f'REVOKE ALL ON {kind} {names} FROM "{role}"')
        for granted, tables in privileges:
            if tables & existing:
                listed_tables = ", ".join(f'"{t}"' for t in sorted(tables & existing))
                tx.execute(f'GRANT {granted} ON {listed_tables} TO "{role}"')
    wide = tx.one(
        "SELECT has_schema_privilege(?, current_schema(), 'CREATE')"
        " OR has_database_privilege(?, current_database(), 'CREATE') AS wide",
        (role, role),
    )
    if wide is not None and wide["wide"]:
        raise ConfigurationError(
            f"PostgreSQL role {role} could create tables (PUBLIC has CREATE on the schema or database): "
            f'run REVOKE CREATE ON SCHEMA "{schema}" FROM PUBLIC'
        )


def _schema(tx: Tx) -> str:
    row = tx.one("SELECT current_schema() AS s")
    assert row is not None and re.fullmatch(r"[A-Za-z0-9_]+", str(row["s"]))
    return str(row["s"])


_ROWS = psycopg.pq.ExecStatus.TUPLES_OK
"""The status of a result that has rows (none for a statement that returns none)."""

_BEGIN_READ = "BEGIN READ ONLY; SELECT"
"""A read unit of work's start, one round trip: the empty SELECT takes the transaction's snapshot."""
_BEGIN_WRITE = "BEGIN"
"""A write unit of work's start (a read-only store's sessions stay read-only: `PostgresRecords.of`)."""

_INHERITED: list[object] = []
"""Connections a forked child inherited from its parent."""


def _close_all(idle: list[psycopg.Connection[dict[str, Any]]]) -> None:
    for conn in list(idle):
        conn.close()


_KINDS = frozenset({"select", "insert", "update", "delete", "merge", "with", "values", "table"})
"""The statements a unit of work may send: reads and writes of tables, which the role's
privileges and a READ ONLY transaction confine. Nothing else runs: transaction control (the
connection is autocommit, so a COMMIT would let what follows run outside the unit of work, and
outside its READ ONLY), session state a pooled connection would carry into the next unit of work
(``SET``, ``RESET``, ``DISCARD``, ``PREPARE``, ``DECLARE``, ``LISTEN``), ``DO``, ``CALL``,
``COPY`` and schema changes (which SQLite's authorizer denies too)."""
_IN_TRANSACTION = ("local", "transaction", "constraints")
"""``SET LOCAL`` / ``SET TRANSACTION`` / ``SET CONSTRAINTS``: they last as long as the unit of work
(the server refuses ``SET TRANSACTION READ WRITE`` once a read unit of work took its snapshot)."""
_DOUBTFUL = re.compile(r"set_config|pg_temp|\btemp(?:orary)?\b", re.IGNORECASE)
"""What, inside an allowed statement, may change session state (a session setting, a temporary
table of ``SELECT INTO TEMP``, which later units of work would read before the service's own):
the unit of work still runs it, and its connection is closed afterwards, never reused."""
_OUTSIDE_TABLES = re.compile(
    r"\blo_(?:creat|create|open|close|lseek|lseek64|tell|tell64|truncate|truncate64|unlink|import|export"
    r"|from_bytea|put|get)\b|\blo(?:read|write)\b|\bpg_notify\b|\bpg_logical_emit_message\b"
    r"|\bpg_(?:try_)?advisory_|\bpg_(?:terminate|cancel)_backend\b"
    r'|\bquery_to_xml|\bts_stat\b|\bts_rewrite\b|\bdblink|u&"',
    re.IGNORECASE,
)
"""Functions PUBLIC may call that act outside the role's tables, where neither its privileges nor
a READ ONLY transaction stop them: large objects (a read call would store data, and any call
outside its tables), ``pg_notify`` (the store's own change notices among others), WAL messages
(seen by logical decoding), advisory locks (the gateway's: a handler holding the audit chain's
would stall every process's appends while it ran), signals to other sessions of the role; and
what would hide such a call from this check (a query run from a string, a name spelled in
Unicode escapes, ``dblink``). A statement naming one is refused before it is sent; a service
serializes its own work with its rows' locks."""
_LEADING = re.compile(r"\s+|--[^\n]*(?:\n|$)|\(")
_WORD = re.compile(r"[A-Za-z_]+")
_PLAIN = re.compile(r"\s*([A-Za-z_]+)(?![^\s(])(?:\s+([A-Za-z_]+))?")
_MULTIPLE = "cannot insert multiple commands into a prepared statement"
"""PostgreSQL's refusal of a text of several statements sent with the extended protocol (a syntax
error without a position, unlike the parser's)."""


def _leading_words(sql: str) -> list[str]:
    """The statement's first two words, lower-case, after white space, comments (``/* */``
    nest in PostgreSQL) and opening parentheses."""
    plain = _PLAIN.match(sql)  # most statements: no comment or parenthesis in front
    if plain is not None:
        return [w.lower() for w in plain.groups() if w]
    at, depth = 0, 0
    while at < len(sql):
        if sql.startswith("/*", at):
            depth, at = depth + 1, at + 2
        elif depth and sql.startswith("*/", at):
            depth, at = depth - 1, at + 2
        elif depth:
            at += 1
        elif found := _LEADING.match(sql, at):
            at = found.end()
        else:
            break
    words = []
    for _ in range(2):
        found = _WORD.match(sql, at)
        if found is None:
            break
        words.append(found.group().lower())
        at = found.end()
        while at < len(sql) and sql[at].isspace():
            at += 1
    return words


def _refuse_kind(scope: RecordsScope, sql: str) -> None:
    """Refuse, before it is sent, a statement that is not a read or write of tables (`_KINDS`),
    or that calls a function acting outside them (`_OUTSIDE_TABLES`)."""
    words = _leading_words(sql)
    if (words and words[0] in _KINDS) or (len(words) == 2 and words[0] == "set" and words[1] in _IN_TRANSACTION):
        outside = _OUTSIDE_TABLES.search(sql)
        if outside is None:
            return
        name = outside.group().lower()
        what = "names spelled in Unicode escapes" if name == 'u&"' else f"calls of {name.rstrip('_')}"
    else:
        what = f"{words[0].upper()} statements" if words else "this statement"
    raise records_denied(scope, "statement", what) from None  # as the server's refusals: no cause


def _refusal(scope: RecordsScope, exc: psycopg.Error, sql: str) -> CapabilityDenied | None:
    """The `CapabilityDenied` a server refusal of the handler's statement is reported as."""
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        found = _DENIED_ON.search(exc.diag.message_primary or "")
        return records_denied(scope, found.group(1) if found else "statement", "this")
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        written = _WRITTEN.match(sql)
        target = written.group(1).lower() if written else "statement"
        return records_denied(scope, target, "a write outside a write transaction")
    if isinstance(exc, psycopg.errors.ActiveSqlTransaction):  # e.g. READ WRITE after the snapshot
        return records_denied(scope, "statement", "a change of the transaction's mode")
    if isinstance(exc, psycopg.errors.SyntaxError) and (
        exc.diag.message_primary == _MULTIPLE  # or in the server's language: the only one without a position
        or (exc.diag.statement_position is None and ";" in sql)
    ):
        return records_denied(scope, "statement", "several statements in one")
    return None


class _GuardedTx:
    """The handler's side of one unit of work: one statement at a time (`_refuse_kind`), each
    sent alone with the extended protocol (a text of several statements is refused whole by the
    server, before any of it runs), and the transaction still open after each (else the
    connection is closed and the unit of work refused)."""

    def __init__(
        self,
        conn: psycopg.Connection[dict[str, Any]],
        cursor: psycopg.Cursor[dict[str, Any]],
        scope: RecordsScope,
        unit: OpenUnit | None,
    ) -> None:
        self._conn = conn
        self._cursor = cursor
        self._scope = scope
        self._unit = unit
        self.doubtful = False
        """A statement may have changed session state: the connection is not reused."""
        self.ended: CapabilityDenied | None = None
        """The refusal of a statement that ended the transaction: every later use raises it."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        if self.ended is not None:
            raise self.ended from None
        _refuse_kind(self._scope, sql)
        self.doubtful = self.doubtful or _DOUBTFUL.search(sql) is not None
        try:
            with self._unit.statement() if self._unit is not None else nullcontext():
                if params:  # with parameters psycopg sends the extended protocol: one statement
                    self._cursor.execute(sql.replace("?", "%s"), tuple(params))
                else:  # without, the simple protocol (which runs every statement of the text) unless piped
                    with self._conn.pipeline():
                        self._cursor.execute(sql)
                left = self._conn.info.transaction_status != psycopg.pq.TransactionStatus.INTRANS
                if left:
                    self._conn.close()  # the handler ended the transaction: nothing more runs on it
                result = self._cursor.pgresult  # its status tells rows; ``description`` builds every column
                rows = list(self._cursor.fetchall()) if result is not None and result.status == _ROWS else []
        except psycopg.Error as exc:
            refused = _refusal(self._scope, exc, sql)
            if refused is None:
                raise
            raise refused from None
        if left:
            self.ended = records_denied(self._scope, "statement", "transaction control")
            raise self.ended from None
        return rows

    def one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        rows = self.execute(sql, params)
        return rows[0] if rows else None

    def send(self, sql: str, params: Sequence[Any] = ()) -> None:
        """A service's own statements are few: this one simply runs now."""
        self.execute(sql, params)

    def many(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[dict[str, Any]]]:
        """A service's own statements are few: one after the other."""
        return [self.execute(sql, params) for sql, params in statements]


class _Login:
    """The idle connections of one login role of a service."""

    MAX_IDLE = 4

    def __init__(self, conninfo: str, role: str, service: str) -> None:
        self.conninfo = conninfo  # carries the role's password: never printed
        self.role = role
        self._service = service
        self._idle: list[psycopg.Connection[dict[str, Any]]] = []
        self._idle_pid = os.getpid()
        self._lock = threading.Lock()
        weakref.finalize(self, _close_all, self._idle)  # idle connections close with the login

    def checkout(self) -> psycopg.Connection[dict[str, Any]]:
        with self._lock:
            if self._idle_pid != os.getpid():  # a forked child: the parent's connections are not ours
                _INHERITED.extend(self._idle)  # never used, never closed here (that would end the parent's)
                self._idle.clear()
                self._idle_pid = os.getpid()
            if self._idle:
                return self._idle.pop()
        try:
            return psycopg.connect(self.conninfo, autocommit=True, row_factory=dict_row, connect_timeout=10)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot log in as {self.role} for the records of {self._service} (run the release "
                f"setup, which provisions it): {redact_url(str(exc).splitlines()[0] if str(exc) else '')}"
            ) from None

    def checkin(self, conn: psycopg.Connection[dict[str, Any]], *, reusable: bool) -> None:
        with self._lock:
            if reusable and self._idle_pid == os.getpid() and len(self._idle) < self.MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle = list(self._idle)
            self._idle.clear()
        for conn in idle:
            conn.close()


class PostgresRecords(ServiceRecords):
    """A service's records, reached as its own login role (and, for the read calls of a service
    whose reads append, as its role for read calls: `grants`)."""

    def __init__(
        self,
        conninfo: str,
        scope: RecordsScope,
        *,
        role: str,
        read_only: bool = False,
        reads: tuple[str, str] | None = None,
    ) -> None:
        """``reads``: the conninfo and name of the role for read calls (None: reads write nothing)."""
        self.scope = scope
        self.role = role
        self.read_only = read_only
        self._login = _Login(conninfo, role, scope.name)
        self._reads = _Login(reads[0], reads[1], scope.name) if reads is not None else None

    def __repr__(self) -> str:
        return f"PostgresRecords({self.scope.name!r}, role={self.role!r})"

    @classmethod
    def of(cls, store: PostgresStore, scope: RecordsScope) -> PostgresRecords:
        """The records of ``scope`` in ``store``'s database (neither the store nor its credentials
        are kept: only the roles')."""
        database, schema = database_name(store._conninfo), store_schema(store)
        given = str(conninfo_to_dict(store._conninfo).get("options") or "")
        options: list[str] = [given, f'-c search_path="{schema}"']
        if store.read_only:  # the server refuses every write in these sessions, as in the store's
            options.append("-c default_transaction_read_only=on")

        def login(role: str) -> str:
            password = role_password(store.keys, database, role)
            return make_conninfo(
                store._conninfo, user=role, password=password, options=" ".join(o for o in options if o)
            )

        role = role_name(database, scope.name, schema)
        reads = None
        if scope.read_appends:
            reads_role = role_name(database, scope.name, schema, reads=True)
            reads = (login(reads_role), reads_role)
        return cls(login(role), scope, role=role, read_only=store.read_only, reads=reads)

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Tx]:
        # inside a read tool's call: READ ONLY, or as the role for read calls (SELECT, and INSERT
        # into the tables reads append to): the server refuses every other write
        kind = unit_of_work(write)
        login = self._reads if kind == "append" else self._login
        write = kind == "write" or (kind == "append" and login is not None)
        if write and self.read_only:
            raise StoreError(f"the records of {self.scope.name} were opened read-only")
        login = login or self._login
        conn = login.checkout()
        # inside a handler call: ended (rolled back, its locks freed) once open longer than the
        # call's timeout (`toolgate.store.records_expiry`)
        unit = OpenUnit.of_call(self.scope, stop=conn.cancel, close=conn.close)
        statement = unit.statement if unit is not None else nullcontext
        reusable = False
        try:
            # a read is READ ONLY from its BEGIN, and takes its snapshot in the same round trip,
            # before the handler's first statement: from then on the server refuses to make the
            # transaction READ WRITE (``SET TRANSACTION``, ``transaction_read_only``)
            with conn.cursor(row_factory=dict_row) as cur:
                with statement():
                    cur.execute(_BEGIN_WRITE if write else _BEGIN_READ, prepare=False)
                tx = _GuardedTx(conn, cur, self.scope, unit)
                yield tx
                if tx.ended is not None:  # refused, and the handler swallowed it
                    raise tx.ended from None
                with statement():
                    cur.execute("COMMIT", prepare=False)
            reusable = not tx.doubtful
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL error in the records of {self.scope.name}: {exc}") from exc
        finally:  # a unit of work that raised is not rolled back: its connection closes
            if unit is None or unit.finish():  # else ended: closed, never reused
                idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                login.checkin(conn, reusable=reusable and idle and not conn.closed)

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """`ServiceRecords.read` in one round trip: BEGIN READ ONLY, the statement and COMMIT
        sent as one pipeline (the extended protocol: one statement, whatever its text holds),
        where a unit of work waits for each of them. The statement is confined as a unit of
        work's is (`_refuse_kind`; a doubtful one closes its connection). A refused or failed
        statement leaves the transaction failed: its connection is closed, never reused."""
        _refuse_kind(self.scope, sql)
        conn = self._login.checkout()
        unit = OpenUnit.of_call(self.scope, stop=conn.cancel, close=conn.close)
        reusable = False
        try:
            with conn.cursor(row_factory=dict_row) as cur, unit.statement() if unit is not None else nullcontext():
                with conn.pipeline():  # one sync, at its end
                    conn.execute("BEGIN READ ONLY")
                    cur.execute(sql.replace("?", "%s") if params else sql, tuple(params) or None)
                    conn.execute("COMMIT")
                result = cur.pgresult
                has_rows = result is not None and result.status == psycopg.pq.ExecStatus.TUPLES_OK
                rows = list(cur.fetchall()) if has_rows else []
            reusable = _DOUBTFUL.search(sql) is None
            return rows
        except psycopg.Error as exc:
            refused = _refusal(self.scope, exc, sql)
            if refused is not None:
                raise refused from None
            raise StoreError(f"PostgreSQL error in the records of {self.scope.name}: {exc}") from exc
        finally:
            if unit is None or unit.finish():  # else ended: closed, never reused
                idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                self._login.checkin(conn, reusable=reusable and idle and not conn.closed)

    def close(self) -> None:
        self._login.close()
        if self._reads is not None:
            self._reads.close()


__all__ = [
    "PostgresRecords",
    "database_name",
    "grants",
    "provision_role",
    "role_name",
    "scram_verifier",
    "store_schema",
]
