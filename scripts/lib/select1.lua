-- A do-nothing sysbench workload for scripts/bench-mysql.sh: every event is
-- one "SELECT 1" over the text protocol (COM_QUERY), so a run measures the
-- round trip through whatever sits between sysbench and the server.
--
--   sysbench scripts/lib/select1.lua --mysql-host=... --mysql-port=... \
--       --mysql-user=... --mysql-password=... --mysql-db=... --threads=N --time=S run
--
-- No tables: prepare and cleanup have nothing to do.

function thread_init()
   drv = sysbench.sql.driver()
   con = drv:connect()
end

function thread_done()
   con:disconnect()
end

function event()
   con:query("SELECT 1")
end
