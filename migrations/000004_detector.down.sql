DROP TABLE IF EXISTS alert_deliveries;
