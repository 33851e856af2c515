-- Run by psql directly and through Sluice; the outputs must be identical.
\set ON_ERROR_STOP 0
select 1 as one, 'two' as two, null as nothing;
create table items(id serial primary key, name text not null, price numeric(10,2), tags text[]);
insert into items(name, price, tags) values ('apple', 1.20, '{fruit,red}'), ('bread', 2.50, null), ('cheese', 7.99, '{dairy}');
copy items(name, price) from stdin;
milk	0.99
eggs	3.10
\.
select * from items order by id;
begin;
update items set price = price * 2 where name = 'apple';
savepoint s1;
delete from items;
rollback to savepoint s1;
commit;
select name, price from items where price > 2 order by name;
select count(*) from items \gset
\echo rows: :count
select 1/0;
select 'after error' as status;
prepare by_name(text) as select id, price from items where name = $1;
execute by_name('eggs');
deallocate by_name;
set datestyle = 'German';
select date '2024-03-15' as d;
reset datestyle;
select date '2024-03-15' as d;
do $$ begin raise notice 'hello from plpgsql %', 42; end $$;
create temp table scratch as select generate_series(1, 5) as g;
select sum(g) from scratch;
select 'a' as x \; select 'b' as y;
copy (select id, name from items order by id) to stdout with (format csv, header);
\copy items(name) to stdout
select repeat('x', 100000) = repeat('x', 100000) as big;
select string_agg(md5(g::text), '') from generate_series(1, 2000) g \gset
select length(:'string_agg') as len;
listen chan;
notify chan, 'payload';
unlisten *;
select pg_typeof(now())::text;
\d items
