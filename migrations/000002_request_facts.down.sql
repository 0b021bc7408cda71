DROP VIEW IF EXISTS request_facts;
