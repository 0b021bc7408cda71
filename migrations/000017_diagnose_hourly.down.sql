-- Back to 000016: diagnose reads its baseline from the landing tables every time.
DROP TABLE IF EXISTS diagnose_hourly;
