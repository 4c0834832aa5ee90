-- simba-lease schema for PostgreSQL 14+ (applied by `SqlBackend::install_schema`, idempotent).
-- Times are database time in UTC epoch milliseconds. Names compare byte-wise (collation "C").
-- Tables created before the `version` or `lock_delay` column (or the lease table's
-- `term_value` and `value_token`): `SqlBackend::install_schema` adds them, or run
--   alter table simba_session add column if not exists version bigint not null default 0,
--     add column if not exists lock_delay bigint not null default 0;
--   alter table simba_lease add column if not exists term_value varchar(1024),
--     add column if not exists value_token bigint;

create table if not exists simba_session
(
    session_id char(32)      collate "C" not null primary key,
    expires_at bigint                    not null, -- database time, epoch ms
    metadata   varchar(1024)             not null default '',
    version    bigint                    not null default 0, -- bumped by every change of its leases
    lock_delay bigint                    not null default 0  -- ms its terms block their names after its expiry
);
create index if not exists idx_session_expires on simba_session (expires_at);

create table if not exists simba_lease
(
    name       varchar(128) collate "C" not null primary key,
    session_id char(32)     collate "C" not null default '', -- empty = free
    token      bigint                   not null,            -- term number, never reset
    term_value varchar(1024),                                -- the value set for term value_token
    value_token bigint                                       -- (a later term shows no value)
);
create index if not exists idx_lease_session on simba_lease (session_id);

create table if not exists simba_member
(
    group_name varchar(128) collate "C" not null,
    session_id char(32)     collate "C" not null,
    primary key (group_name, session_id)
);
create index if not exists idx_member_session on simba_member (session_id);

-- Fair-lock queues: one place per waiting session, ordered by seq, live while its session is
-- and until expires_at (renewed by every attempt of its waiter).
create table if not exists simba_queue
(
    name       varchar(128) collate "C" not null,
    session_id char(32)     collate "C" not null,
    seq        bigint generated always as identity,
    expires_at bigint                   not null, -- database time, epoch ms
    primary key (name, session_id)
);
create index if not exists idx_queue_seq on simba_queue (name, seq);

-- Run-once jobs: one row per job name, never deleted (the token never resets). Taken until
-- until_at, and while running (1) only as long as its session is live too.
create table if not exists simba_job
(
    name       varchar(128) collate "C" not null primary key,
    session_id char(32)     collate "C" not null default '', -- the last claimer
    token      bigint                   not null,            -- claim number, never reset
    started_at bigint                   not null default 0,  -- database time, epoch ms
    until_at   bigint                   not null default 0,  -- database time, epoch ms
    running    smallint                 not null default 0
);
