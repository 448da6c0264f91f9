CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);
CREATE TABLE meta (
	"key" TEXT NOT NULL, 
	value TEXT NOT NULL, 
	PRIMARY KEY ("key")
);
CREATE TABLE experiments (
	id INTEGER NOT NULL, 
	name TEXT NOT NULL, 
	status TEXT NOT NULL, 
	plan_source TEXT NOT NULL, 
	plan_text TEXT NOT NULL, 
	plan_json TEXT NOT NULL, 
	seed INTEGER NOT NULL, 
	baseline TEXT NOT NULL, 
	started TEXT NOT NULL, 
	finished TEXT, 
	host_json TEXT NOT NULL, 
	stacks_json TEXT DEFAULT '{}' NOT NULL, 
	warnings_json TEXT DEFAULT '[]' NOT NULL, 
	version TEXT NOT NULL, 
	pid INTEGER, fleet TEXT, host_name TEXT, owner TEXT, status_reason TEXT, 
	PRIMARY KEY (id), 
	CONSTRAINT status_known CHECK (status IN ('running', 'done', 'interrupted', 'failed'))
);
CREATE TABLE runs (
	id INTEGER NOT NULL, 
	experiment_id INTEGER NOT NULL, 
	trial INTEGER NOT NULL, 
	stack TEXT NOT NULL, 
	workload TEXT NOT NULL, 
	rep INTEGER NOT NULL, 
	warmup INTEGER NOT NULL, 
	status TEXT NOT NULL, 
	error TEXT, 
	exit_code INTEGER, 
	started TEXT NOT NULL, 
	wall_s FLOAT, 
	user_s FLOAT, 
	sys_s FLOAT, 
	cpu_pct FLOAT, 
	maxrss_kb INTEGER, 
	minflt INTEGER, 
	majflt INTEGER, 
	inblock INTEGER, 
	oublock INTEGER, 
	nvcsw INTEGER, 
	nivcsw INTEGER, 
	read_bytes INTEGER, 
	write_bytes INTEGER, 
	read_ios INTEGER, 
	write_ios INTEGER, 
	helper_cpu_s FLOAT, 
	psi_io_some_s FLOAT, 
	psi_io_full_s FLOAT, 
	psi_cpu_some_s FLOAT, 
	psi_memory_some_s FLOAT, 
	kthread_cpu_s FLOAT, 
	vm_majfault INTEGER, 
	vm_written_bytes INTEGER, 
	dirty_peak_bytes INTEGER, 
	disk_write_bytes INTEGER, 
	disk_busy_pct FLOAT, 
	disk_wait_ms FLOAT, 
	disk_in_flight_peak INTEGER, 
	read_iops FLOAT, 
	read_bw_bytes FLOAT, 
	read_io_bytes INTEGER, 
	read_clat_mean_ns FLOAT, 
	read_clat_p50_ns FLOAT, 
	read_clat_p90_ns FLOAT, 
	read_clat_p99_ns FLOAT, 
	read_clat_p999_ns FLOAT, 
	write_iops FLOAT, 
	write_bw_bytes FLOAT, 
	write_io_bytes INTEGER, 
	write_clat_mean_ns FLOAT, 
	write_clat_p50_ns FLOAT, 
	write_clat_p90_ns FLOAT, 
	write_clat_p99_ns FLOAT, 
	write_clat_p999_ns FLOAT, 
	fio_runtime_s FLOAT, 
	units FLOAT, 
	unit TEXT, 
	throughput FLOAT, 
	devices_json TEXT DEFAULT '{}' NOT NULL, 
	facts_json TEXT DEFAULT '{}' NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT run_status_known CHECK (status IN ('ok', 'failed')), 
	FOREIGN KEY(experiment_id) REFERENCES experiments (id)
);
CREATE INDEX runs_by_experiment ON runs (experiment_id, stack, workload);
CREATE TABLE experiment_facts (
	experiment_id INTEGER NOT NULL, 
	"key" TEXT NOT NULL, 
	value_json TEXT NOT NULL, 
	PRIMARY KEY (experiment_id, "key"), 
	FOREIGN KEY(experiment_id) REFERENCES experiments (id)
);
CREATE TABLE samples (
	run_id INTEGER NOT NULL, 
	t_s FLOAT NOT NULL, 
	dt_s FLOAT NOT NULL, 
	read_bytes INTEGER, 
	write_bytes INTEGER, 
	disk_read_bytes INTEGER, 
	disk_write_bytes INTEGER, 
	cpu_busy_pct FLOAT, 
	cpu_iowait_pct FLOAT, 
	dirty_bytes INTEGER, 
	disk_in_flight INTEGER, 
	FOREIGN KEY(run_id) REFERENCES runs (id)
);
CREATE INDEX samples_by_run ON samples (run_id);
CREATE TABLE sentinels (
	experiment_id INTEGER NOT NULL, 
	seq INTEGER NOT NULL, 
	taken TEXT NOT NULL, 
	after_trial INTEGER, 
	cost_s FLOAT NOT NULL, 
	parts_json TEXT NOT NULL, 
	PRIMARY KEY (experiment_id, seq), 
	FOREIGN KEY(experiment_id) REFERENCES experiments (id)
);
CREATE TABLE fleets (
	id TEXT NOT NULL, 
	name TEXT NOT NULL, 
	plan_source TEXT NOT NULL, 
	started TEXT NOT NULL, 
	reference TEXT NOT NULL, 
	hosts_json TEXT NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX experiments_by_fleet ON experiments (fleet);
CREATE TABLE bisects (
	id INTEGER NOT NULL, 
	name TEXT NOT NULL, 
	plan_source TEXT NOT NULL, 
	plan_text TEXT NOT NULL, 
	good TEXT NOT NULL, 
	bad TEXT NOT NULL, 
	status TEXT NOT NULL, 
	started TEXT NOT NULL, 
	finished TEXT, 
	pid INTEGER, 
	owner TEXT, 
	state_json TEXT NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO meta VALUES ('schema_version', '3');
INSERT INTO alembic_version VALUES ('0003');
