-- simba-lease schema for MySQL 8 and MariaDB 10.11 (applied by `SqlBackend::install_schema`,
-- idempotent). Times are database time in UTC epoch milliseconds. Names compare byte-wise
-- (binary collations).
-- Tables created before the `version` or `lock_delay` column (or the lease table's
-- `term_value` and `value_token`): `SqlBackend::install_schema` adds them (MySQL 8 has no
-- `add column if not exists`), or run
--   alter table simba_session add column version bigint not null default 0;
--   alter table simba_session add column lock_delay bigint not null default 0;
--   alter table simba_lease add column term_value varchar(1024) character set utf8mb4
--     collate utf8mb4_bin null, add column value_token bigint null;

create table if not exists simba_session
(
    session_id char(32) character set ascii collate ascii_bin not null primary key,
    expires_at bigint                                        not null comment 'database time, epoch ms',
    metadata   varchar(1024) character set utf8mb4 collate utf8mb4_bin not null default '',
    version    bigint                                        not null default 0 comment 'bumped by every change of its leases and read-write terms',
    lock_delay bigint                                        not null default 0 comment 'ms its terms block their names after its expiry',
    index idx_session_expires (expires_at)
) engine = InnoDB;

create table if not exists simba_lease
(
    name       varchar(128) character set ascii collate ascii_bin not null primary key,
    session_id char(32) character set ascii collate ascii_bin     not null default '' comment 'empty = free',
    token      bigint                                             not null comment 'term number, never reset',
    term_value  varchar(1024) character set utf8mb4 collate utf8mb4_bin null comment 'the value set for term value_token',
    value_token bigint                                            null comment 'a later term shows no value',
    index idx_lease_session (session_id)
) engine = InnoDB;

create table if not exists simba_member
(
    group_name varchar(128) character set utf8mb4 collate utf8mb4_bin not null,
    session_id char(32) character set ascii collate ascii_bin not null,
    primary key (group_name, session_id),
    index idx_member_session (session_id)
) engine = InnoDB;

-- Fair-lock queues: one place per waiting session, ordered by seq, live while its session is
-- and until expires_at (renewed by every attempt of its waiter).
create table if not exists simba_queue
(
    name       varchar(128) character set ascii collate ascii_bin not null,
    session_id char(32) character set ascii collate ascii_bin     not null,
    seq        bigint                                             not null auto_increment,
    expires_at bigint                                             not null comment 'database time, epoch ms',
    primary key (name, session_id),
    unique index idx_queue_seq (seq)
) engine = InnoDB;

-- Run-once jobs: one row per job name, never deleted (the token never resets). Taken until
-- until_at, and while running (1) only as long as its session is live too.
create table if not exists simba_job
(
    name       varchar(128) character set ascii collate ascii_bin not null primary key,
    session_id char(32) character set ascii collate ascii_bin     not null default '' comment 'the last claimer',
    token      bigint                                             not null comment 'claim number, never reset',
    started_at bigint                                             not null default 0 comment 'database time, epoch ms',
    until_at   bigint                                             not null default 0 comment 'database time, epoch ms',
    running    tinyint                                            not null default 0
) engine = InnoDB;

-- Read-write locks: one row per name with its token counter (never reset, never deleted),
-- the terms held (read or write) and the waiting writers (ordered by seq, live while their
-- session is and until expires_at, renewed by every attempt of their waiter). A place is
-- live only while its session is, and a term blocks its name while its session is live or,
-- once expired, until the session's expires_at + lock_delay (the session row stays as long).
create table if not exists simba_rw
(
    name  varchar(128) character set ascii collate ascii_bin not null primary key,
    token bigint                                        not null comment 'the newest token handed out'
) engine = InnoDB;

create table if not exists simba_rw_holder
(
    name       varchar(128) character set ascii collate ascii_bin not null,
    session_id char(32) character set ascii collate ascii_bin     not null,
    writer     tinyint                                            not null comment '1 the write term, 0 a read term, 3 or 2 released (counted nowhere)',
    token      bigint                                             not null,
    primary key (name, session_id),
    index idx_rw_holder_session (session_id)
) engine = InnoDB;

create table if not exists simba_rw_waiter
(
    name       varchar(128) character set ascii collate ascii_bin not null,
    session_id char(32) character set ascii collate ascii_bin     not null,
    seq        bigint                                             not null auto_increment,
    expires_at bigint                                             not null comment 'database time, epoch ms',
    primary key (name, session_id),
    unique index idx_rw_waiter_seq (seq),
    index idx_rw_waiter_session (session_id)
) engine = InnoDB;
